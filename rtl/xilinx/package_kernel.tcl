# Package the UniFL MontMult RTL kernel as a Vitis .xo (Vivado's package_xo flow).
#
# NOT RUN HERE: no Xilinx tools exist on the machines this project is developed and tested on.
# Written from AMD's documentation (UG1393 / UG1700 "Packaging the RTL Code as a Vitis XO",
# "package_xo Command", "RTL Kernel XML File") and checked only by reading; the kernel itself is
# verified in simulation (tests/test_fpga_rtl_xilinx.py, Icarus + cocotb).
#
# Usage (Vivado 2022.1 or newer, from any directory):
#   vivado -mode batch -source rtl/xilinx/package_kernel.tcl \
#          -tclargs montmul_L16 build/montmul_L16.xo [engines] [part]
#   kernel:  montmul_L16 / montmul_L32 (the MontMult cluster), mont_exp_L16 / mont_exp_L32 or
#            paillier_enc_L32 / paillier_enc_L64 (the exponentiation unit, modexp_kernel.v)
#   engines: MontMult engines in the kernel (default 4)
#   part:    the card's FPGA part (default a VU13P; use the part of your platform's .xpfm)
# Then link for the card (see docs/backends/fpga-xilinx.md):
#   v++ -l -t hw --platform <platform.xpfm> build/montmul_L16.xo -o build/montmul.xclbin

if {[llength $argv] < 2} {
    error "usage: -tclargs <montmul_L16|montmul_L32> <out.xo> \[engines\] \[part\]"
}
set kernel  [lindex $argv 0]
set xo_path [file normalize [lindex $argv 1]]
set engines [expr {[llength $argv] > 2 ? [lindex $argv 2] : 4}]
set part    [expr {[llength $argv] > 3 ? [lindex $argv 3] : "xcvu13p-fhgb2104-2-e"}]
set montmul_kernels {montmul_L16 montmul_L32}
set modexp_kernels {mont_exp_L16 mont_exp_L32 paillier_enc_L32 paillier_enc_L64}
if {$kernel ni [concat $montmul_kernels $modexp_kernels]} {
    error "kernel must be one of $montmul_kernels $modexp_kernels, not $kernel"
}
set is_montmul [expr {$kernel in $montmul_kernels}]

set here [file dirname [file normalize [info script]]]
set rtl  [file dirname $here]
set work [file normalize ./pack_$kernel]
file delete -force $work
file mkdir $work

# ---- a throw-away project holding the sources, top = the kernel name
create_project -force pack_$kernel $work/project -part $part
if {$is_montmul} {
    set sources [list $here/montmul_kernel.v $rtl/unifl_mm_cluster.v $rtl/unifl_mm_engine.v \
                 $rtl/unifl_mm_parts.v]
} else {
    set sources [list $here/modexp_kernel.v $rtl/unifl_modexp.v $rtl/unifl_mm_engine.v \
                 $rtl/unifl_mm_parts.v]
}
add_files -norecurse $sources
set_property top $kernel [current_fileset]
set_property generic "N=$engines" [current_fileset]
update_compile_order -fileset sources_1

# ---- package as IP; the bus interfaces are inferred from the port names
#      (ap_clk, ap_rst_n, interrupt, m_axi_gmem_*, s_axi_control_*)
ipx::package_project -root_dir $work/ip -vendor unifl.org -library kernel -taxonomy /KernelIP \
    -import_files -set_current false
ipx::unload_core $work/ip/component.xml
ipx::edit_ip_in_project -upgrade true -name edit_$kernel -directory $work/ip $work/ip/component.xml
set core [ipx::current_core]

# Vitis kernel properties: an RTL kernel under XRT's ap_ctrl_hs control protocol
set_property sdx_kernel true $core
set_property sdx_kernel_type rtl $core
set_property vitis_drc {ctrl_protocol ap_ctrl_hs} $core
set_property ipi_drc {ignore_freq_hz false} $core

# every interface runs on ap_clk; ap_rst_n is its reset
ipx::associate_bus_interfaces -busif m_axi_gmem -clock ap_clk $core
ipx::associate_bus_interfaces -busif s_axi_control -clock ap_clk $core
ipx::associate_bus_interfaces -clock ap_clk -reset ap_rst_n $core

# register map of s_axi_control (the offsets of kernel.xml and montmul_kernel.v); the four
# pointer registers are tied to m_axi_gmem so v++ knows which memory they address
set mm [ipx::get_memory_maps s_axi_control -of_objects $core]
if {$mm eq ""} {
    set mm [ipx::add_memory_map s_axi_control $core]
    set_property slave_memory_map_ref s_axi_control [ipx::get_bus_interfaces s_axi_control -of_objects $core]
}
set blk [ipx::get_address_blocks reg0 -of_objects $mm]
if {$blk eq ""} { set blk [ipx::add_address_block reg0 $mm] }
set_property range 0x1000 $blk
set regs_montmul {
    CTRL   0x000 32 0
    GIER   0x004 32 0
    IP_IER 0x008 32 0
    IP_ISR 0x00C 32 0
    a      0x010 64 1
    b      0x018 64 1
    out    0x020 64 1
    consts 0x028 64 1
    n0     0x030 64 0
    n      0x038 32 0
    status 0x040 32 0
}
set regs_mont_exp {
    CTRL     0x000 32 0
    GIER     0x004 32 0
    IP_IER   0x008 32 0
    IP_ISR   0x00C 32 0
    base     0x010 64 1
    exps     0x018 64 1
    out      0x020 64 1
    scratch  0x028 64 1
    consts   0x030 64 1
    n0       0x038 64 0
    n        0x040 32 0
    le       0x048 32 0
    e_stride 0x050 32 0
    ebits    0x058 32 0
    w        0x060 32 0
    status   0x068 32 0
}
set regs_paillier_enc {
    CTRL    0x000 32 0
    GIER    0x004 32 0
    IP_IER  0x008 32 0
    IP_ISR  0x00C 32 0
    msg     0x010 64 1
    rnd     0x018 64 1
    nexp    0x020 64 1
    out     0x028 64 1
    scratch 0x030 64 1
    consts  0x038 64 1
    n0      0x040 64 0
    n       0x048 32 0
    le      0x050 32 0
    ebits   0x058 32 0
    w       0x060 32 0
    status  0x068 32 0
}
if {$is_montmul} {
    set regs $regs_montmul
} elseif {[string match mont_exp_* $kernel]} {
    set regs $regs_mont_exp
} else {
    set regs $regs_paillier_enc
}
foreach {name offset bits pointer} $regs {
    set reg [ipx::add_register $name $blk]
    set_property address_offset $offset $reg
    set_property size $bits $reg
    if {$pointer} {
        set_property value m_axi_gmem [ipx::add_register_parameter ASSOCIATED_BUSIF $reg]
    }
}

set_property core_revision 1 $core
ipx::create_xgui_files $core
ipx::update_checksums $core
ipx::check_integrity -kernel $core
ipx::save_core $core
close_project -delete

# ---- the kernel description, renamed for the other size
if {$is_montmul} {
    set xml_file $here/kernel.xml
    set xml_name montmul_L16
} elseif {[string match mont_exp_* $kernel]} {
    set xml_file $here/kernel_modexp.xml
    set xml_name mont_exp_L16
} else {
    set xml_file $here/kernel_paillier_enc.xml
    set xml_name paillier_enc_L32
}
set xml_in [open $xml_file r]
set xml [read $xml_in]
close $xml_in
set xml [string map [list $xml_name $kernel] $xml]
set xml_path $work/kernel_$kernel.xml
set xml_out [open $xml_path w]
puts -nonewline $xml_out $xml
close $xml_out

file mkdir [file dirname $xo_path]
package_xo -force -xo_path $xo_path -kernel_name $kernel -ip_directory $work/ip -kernel_xml $xml_path
puts "packaged $kernel (N=$engines, part $part) into $xo_path"
