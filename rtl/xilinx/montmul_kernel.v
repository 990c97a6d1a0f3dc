// Vitis RTL kernel around the MontMult cluster: the same name and argument list as the OpenCL
// kernel of unifl/backends/fpga/kernels/montmul.cl, so the fpga backend's host code launches it
// from an .xclbin unchanged:
//
//   montmul_L<D>(const ulong *a, const ulong *b, ulong *out, const ulong *consts, ulong n0, uint n)
//   out[i] = a[i] * b[i] * 2^(-64*D) mod m   for i < n,  m = consts[0 .. D-1]  (64-bit words,
//   least significant first; consts[D ..] holds R mod m, which this kernel does not need)
//
// Interfaces (the names Vitis requires of an XRT-managed RTL kernel, UG1393 "Kernel Interface
// Requirements" / "Control Requirements for XRT-Managed Kernels"):
//   ap_clk, ap_rst_n (active-low, synchronous to ap_clk), interrupt (active high),
//   s_axi_control_*  AXI4-Lite slave, 32-bit data, ap_ctrl_hs register map (see below),
//   m_axi_gmem_*     one AXI4 master, 64-bit address, 64-bit data, INCR bursts, ID-less (one ID).
//
// Register map (byte offsets; the same offsets are declared in kernel.xml):
//   0x00 ap_ctrl: bit0 ap_start (R/W, cleared by the kernel when it takes the start),
//                 bit1 ap_done (R, clear on read), bit2 ap_idle (R), bit3 ap_ready (R, clear on
//                 read; raised together with ap_done: the arguments are held for the whole run)
//   0x04 GIE  bit0          0x08 IER bits[1:0] (ap_done, ap_ready)
//   0x0C ISR  bits[1:0] (toggle on write), interrupt = GIE & |(ISR)
//   0x10/0x14 a   0x18/0x1C b   0x20/0x24 out   0x28/0x2C consts  (64-bit pointers, low word first)
//   0x30/0x34 n0 (64-bit scalar)                0x38 n (32-bit scalar)
//
// Data path.  Why a 64-bit data bus: it is the engine's word width, so a/b words go from R straight
// through a FIFO into the cluster with no width converter, and one kernel instance keeps up with
// about 8 engines at 1024 bits (32 read beats per row against ~271 cycles per MontMult per engine,
// see docs/backends/fpga-xilinx.md).  A card scales by linking several compute units (each with its own
// port and memory bank) rather than by one wide port, and the host's ring of in-flight chunks
// already keeps several launches outstanding.
//
//   1. consts: the D words of m are read (burst(s) cut at 4 KiB) and passed to the cluster's cfg
//      port, followed by one beat of n0.
//   2. a/b: read as pairs of equal-length bursts (a burst, then the b burst for the same words),
//      each cut at MAX_BURST beats and at the 4 KiB boundary of either address; the R beats of an
//      a burst go to the a FIFO, those of a b burst to the b FIFO (responses come back in order:
//      one ID).  A pair is issued only when both FIFOs have room reserved for it, so R is never
//      stalled by a full FIFO and reads run ahead of the engines by up to FIFO_DEPTH words.
//   3. the cluster takes a word pair whenever both FIFOs hold one; its results (in operand order)
//      go to an out FIFO, out_ready = not full.
//   4. out: a write burst (cut like the reads) starts only when the out FIFO already holds all
//      its beats, so W never waits on the engines once AW is issued; AW and the first W beat are
//      offered together (the AXI rule: a master must not wait for AWREADY before WVALID).
//   5. ap_done when every write response has come back (so the data is in memory).
// Pointers must be 8-byte aligned (XRT buffers are 4 KiB aligned).
//
// Contract of the rows: a, b < 2^(64 D) with a < m or b < m; then out = a b R^-1 mod m < m exactly
// (T < 2m before the one subtraction).  The host checks its operands below m before they come
// here (unifl.core.montgomery.MontContext.check_operands).
//
// Memory errors: 0x40 status (R) holds sticky bits of the last run, 0 an RRESP error and 1 a BRESP
// error.  An OpenCL host cannot read it, so errors also reach it in the data: after an RRESP error
// every row written from then on is all ones (above any m: no MontMult returns it), and a failed
// write leaves the host's own fill of out (all ones) in place; the host checks every row against m.
`timescale 1ns / 1ps
`default_nettype none

module unifl_vitis_montmul #(
    parameter integer D = 16,                    // 64-bit words per operand (16: 1024-bit, 32: 2048)
    parameter integer N = 4,                     // engines in the cluster
    parameter integer FIFO_DEPTH = 512,          // words per a / b / out FIFO (power of two, >= MAX_BURST)
    parameter integer MAX_BURST = 256,           // beats per AXI4 INCR burst (AXI4 allows up to 256)
    parameter integer C_S_AXI_CONTROL_ADDR_WIDTH = 12,
    parameter integer C_S_AXI_CONTROL_DATA_WIDTH = 32,
    parameter integer C_M_AXI_GMEM_ADDR_WIDTH = 64,
    parameter integer C_M_AXI_GMEM_DATA_WIDTH = 64
) (
    input  wire        ap_clk,
    input  wire        ap_rst_n,
    output wire        interrupt,
    // AXI4 master (global memory)
    output wire        m_axi_gmem_AWVALID,
    input  wire        m_axi_gmem_AWREADY,
    output wire [C_M_AXI_GMEM_ADDR_WIDTH-1:0] m_axi_gmem_AWADDR,
    output wire [7:0]  m_axi_gmem_AWLEN,
    output wire [2:0]  m_axi_gmem_AWSIZE,
    output wire [1:0]  m_axi_gmem_AWBURST,
    output wire        m_axi_gmem_WVALID,
    input  wire        m_axi_gmem_WREADY,
    output wire [C_M_AXI_GMEM_DATA_WIDTH-1:0] m_axi_gmem_WDATA,
    output wire [C_M_AXI_GMEM_DATA_WIDTH/8-1:0] m_axi_gmem_WSTRB,
    output wire        m_axi_gmem_WLAST,
    input  wire        m_axi_gmem_BVALID,
    output wire        m_axi_gmem_BREADY,
    input  wire [1:0]  m_axi_gmem_BRESP,
    output wire        m_axi_gmem_ARVALID,
    input  wire        m_axi_gmem_ARREADY,
    output wire [C_M_AXI_GMEM_ADDR_WIDTH-1:0] m_axi_gmem_ARADDR,
    output wire [7:0]  m_axi_gmem_ARLEN,
    output wire [2:0]  m_axi_gmem_ARSIZE,
    output wire [1:0]  m_axi_gmem_ARBURST,
    input  wire        m_axi_gmem_RVALID,
    output wire        m_axi_gmem_RREADY,
    input  wire [C_M_AXI_GMEM_DATA_WIDTH-1:0] m_axi_gmem_RDATA,
    input  wire [1:0]  m_axi_gmem_RRESP,
    input  wire        m_axi_gmem_RLAST,
    // AXI4-Lite slave (control)
    input  wire        s_axi_control_AWVALID,
    output wire        s_axi_control_AWREADY,
    input  wire [C_S_AXI_CONTROL_ADDR_WIDTH-1:0] s_axi_control_AWADDR,
    input  wire        s_axi_control_WVALID,
    output wire        s_axi_control_WREADY,
    input  wire [C_S_AXI_CONTROL_DATA_WIDTH-1:0] s_axi_control_WDATA,
    input  wire [C_S_AXI_CONTROL_DATA_WIDTH/8-1:0] s_axi_control_WSTRB,
    input  wire        s_axi_control_ARVALID,
    output wire        s_axi_control_ARREADY,
    input  wire [C_S_AXI_CONTROL_ADDR_WIDTH-1:0] s_axi_control_ARADDR,
    output wire        s_axi_control_RVALID,
    input  wire        s_axi_control_RREADY,
    output wire [C_S_AXI_CONTROL_DATA_WIDTH-1:0] s_axi_control_RDATA,
    output wire [1:0]  s_axi_control_RRESP,
    output wire        s_axi_control_BVALID,
    input  wire        s_axi_control_BREADY,
    output wire [1:0]  s_axi_control_BRESP
);
    localparam integer W = 64;
    localparam integer FA = $clog2(FIFO_DEPTH);
    localparam integer PAGE_WORDS = 4096 / (W / 8);          // 512 words in a 4 KiB page

    // a burst is issued only once its whole length fits in a FIFO: a FIFO shorter than the
    // longest burst would wait forever (simulation-time check; synthesis ignores initial blocks)
    initial begin
        if (FIFO_DEPTH < MAX_BURST || MAX_BURST > 256 || MAX_BURST < 1 || D > 256
                || (FIFO_DEPTH & (FIFO_DEPTH - 1)) != 0) begin
            $display("unifl_vitis_montmul: need 1 <= MAX_BURST <= 256, MAX_BURST <= FIFO_DEPTH (a power of two), D <= 256; got D=%0d FIFO_DEPTH=%0d MAX_BURST=%0d",
                     D, FIFO_DEPTH, MAX_BURST);
            $finish;
        end
    end

    // ---------------------------------------------------------------- reset (pipelined, UG1393)
    reg rst_n_q = 1'b0;
    always @(posedge ap_clk) rst_n_q <= ap_rst_n;

    // ---------------------------------------------------------------- AXI4-Lite control slave
    localparam [11:0] A_CTRL = 12'h00, A_GIE = 12'h04, A_IER = 12'h08, A_ISR = 12'h0C,
                      A_A_LO = 12'h10, A_A_HI = 12'h14, A_B_LO = 12'h18, A_B_HI = 12'h1C,
                      A_O_LO = 12'h20, A_O_HI = 12'h24, A_C_LO = 12'h28, A_C_HI = 12'h2C,
                      A_N0_LO = 12'h30, A_N0_HI = 12'h34, A_N = 12'h38, A_STATUS = 12'h40;

    reg        reg_start, reg_done, reg_ready, reg_gie;
    reg [1:0]  reg_ier, reg_isr;
    reg [63:0] arg_a, arg_b, arg_out, arg_consts, arg_n0;
    reg [31:0] arg_n;
    reg [1:0]  status;             // sticky: 0 RRESP error, 1 BRESP error (cleared by ap_start)
    reg        poison;             // rows written from now on are all ones
    wire       run_idle;           // the data path has no run in progress
    wire       run_done_pulse;     // one cycle: the run finished (every write response is back)
    wire       run_take_start;     // one cycle: the data path takes ap_start

    // write channel: AW and W accepted together, then one B
    reg        ctl_bvalid;
    wire       ctl_wr = s_axi_control_AWVALID && s_axi_control_WVALID && !ctl_bvalid;
    assign s_axi_control_AWREADY = ctl_wr;
    assign s_axi_control_WREADY  = ctl_wr;
    assign s_axi_control_BVALID  = ctl_bvalid;
    assign s_axi_control_BRESP   = 2'b00;
    wire [11:0] ctl_waddr = {s_axi_control_AWADDR[11:2], 2'b00};

    // read channel: AR accepted when no R is pending; RDATA registered at the AR handshake
    reg        ctl_rvalid;
    reg [31:0] ctl_rdata;
    assign s_axi_control_ARREADY = !ctl_rvalid;
    assign s_axi_control_RVALID  = ctl_rvalid;
    assign s_axi_control_RDATA   = ctl_rdata;
    assign s_axi_control_RRESP   = 2'b00;
    wire        ctl_rd = s_axi_control_ARVALID && !ctl_rvalid;
    wire [11:0] ctl_raddr = {s_axi_control_ARADDR[11:2], 2'b00};

    function [31:0] merge(input [31:0] old, input [31:0] data, input [3:0] strb);
        integer k;
        begin
            for (k = 0; k < 4; k = k + 1) merge[8*k +: 8] = strb[k] ? data[8*k +: 8] : old[8*k +: 8];
        end
    endfunction

    always @(posedge ap_clk) begin
        if (!rst_n_q) begin
            ctl_bvalid <= 1'b0;
            ctl_rvalid <= 1'b0;
            ctl_rdata  <= 32'd0;
            reg_start  <= 1'b0;
            reg_done   <= 1'b0;
            reg_ready  <= 1'b0;
            reg_gie    <= 1'b0;
            reg_ier    <= 2'b00;
            reg_isr    <= 2'b00;
            arg_a <= 64'd0; arg_b <= 64'd0; arg_out <= 64'd0; arg_consts <= 64'd0;
            arg_n0 <= 64'd0; arg_n <= 32'd0;
        end else begin
            // ---- writes
            if (ctl_wr) begin
                ctl_bvalid <= 1'b1;
                case (ctl_waddr)
                    A_CTRL:  if (s_axi_control_WSTRB[0] && s_axi_control_WDATA[0]) reg_start <= 1'b1;
                    A_GIE:   if (s_axi_control_WSTRB[0]) reg_gie <= s_axi_control_WDATA[0];
                    A_IER:   if (s_axi_control_WSTRB[0]) reg_ier <= s_axi_control_WDATA[1:0];
                    A_A_LO:  arg_a[31:0]       <= merge(arg_a[31:0], s_axi_control_WDATA, s_axi_control_WSTRB);
                    A_A_HI:  arg_a[63:32]      <= merge(arg_a[63:32], s_axi_control_WDATA, s_axi_control_WSTRB);
                    A_B_LO:  arg_b[31:0]       <= merge(arg_b[31:0], s_axi_control_WDATA, s_axi_control_WSTRB);
                    A_B_HI:  arg_b[63:32]      <= merge(arg_b[63:32], s_axi_control_WDATA, s_axi_control_WSTRB);
                    A_O_LO:  arg_out[31:0]     <= merge(arg_out[31:0], s_axi_control_WDATA, s_axi_control_WSTRB);
                    A_O_HI:  arg_out[63:32]    <= merge(arg_out[63:32], s_axi_control_WDATA, s_axi_control_WSTRB);
                    A_C_LO:  arg_consts[31:0]  <= merge(arg_consts[31:0], s_axi_control_WDATA, s_axi_control_WSTRB);
                    A_C_HI:  arg_consts[63:32] <= merge(arg_consts[63:32], s_axi_control_WDATA, s_axi_control_WSTRB);
                    A_N0_LO: arg_n0[31:0]      <= merge(arg_n0[31:0], s_axi_control_WDATA, s_axi_control_WSTRB);
                    A_N0_HI: arg_n0[63:32]     <= merge(arg_n0[63:32], s_axi_control_WDATA, s_axi_control_WSTRB);
                    A_N:     arg_n             <= merge(arg_n, s_axi_control_WDATA, s_axi_control_WSTRB);
                    default: ;
                endcase
            end
            if (ctl_bvalid && s_axi_control_BREADY) ctl_bvalid <= 1'b0;
            // ---- start handshake: cleared when the data path takes it
            if (run_take_start) reg_start <= 1'b0;
            // ---- reads (ap_done / ap_ready clear on a read of 0x00; a new done in the same cycle wins)
            if (ctl_rd) begin
                ctl_rvalid <= 1'b1;
                case (ctl_raddr)
                    A_CTRL:  ctl_rdata <= {28'd0, reg_ready, run_idle && !reg_start, reg_done, reg_start};
                    A_GIE:   ctl_rdata <= {31'd0, reg_gie};
                    A_IER:   ctl_rdata <= {30'd0, reg_ier};
                    A_ISR:   ctl_rdata <= {30'd0, reg_isr};
                    A_A_LO:  ctl_rdata <= arg_a[31:0];
                    A_A_HI:  ctl_rdata <= arg_a[63:32];
                    A_B_LO:  ctl_rdata <= arg_b[31:0];
                    A_B_HI:  ctl_rdata <= arg_b[63:32];
                    A_O_LO:  ctl_rdata <= arg_out[31:0];
                    A_O_HI:  ctl_rdata <= arg_out[63:32];
                    A_C_LO:  ctl_rdata <= arg_consts[31:0];
                    A_C_HI:  ctl_rdata <= arg_consts[63:32];
                    A_N0_LO: ctl_rdata <= arg_n0[31:0];
                    A_N0_HI: ctl_rdata <= arg_n0[63:32];
                    A_N:     ctl_rdata <= arg_n;
                    A_STATUS: ctl_rdata <= {30'd0, status};
                    default: ctl_rdata <= 32'd0;
                endcase
                if (ctl_raddr == A_CTRL) begin
                    reg_done  <= 1'b0;
                    reg_ready <= 1'b0;
                end
            end
            if (ctl_rvalid && s_axi_control_RREADY) ctl_rvalid <= 1'b0;
            if (run_done_pulse) begin
                reg_done  <= 1'b1;
                reg_ready <= 1'b1;
            end
            // ---- interrupt status: set by enabled events, toggled by writes of 1
            begin : isr_update
                reg [1:0] isr_next;
                isr_next = reg_isr;
                if (ctl_wr && ctl_waddr == A_ISR && s_axi_control_WSTRB[0])
                    isr_next = isr_next ^ s_axi_control_WDATA[1:0];
                if (run_done_pulse) isr_next = isr_next | reg_ier;
                reg_isr <= isr_next;
            end
        end
    end
    assign interrupt = reg_gie && (|reg_isr);

    // ---------------------------------------------------------------- run control
    localparam [2:0] S_IDLE = 3'd0, S_CFG = 3'd1, S_N0 = 3'd2, S_RUN = 3'd3, S_DONE = 3'd4;
    reg [2:0] state;
    reg [63:0] run_n0;

    assign run_idle       = (state == S_IDLE);
    assign run_take_start = (state == S_IDLE) && reg_start;
    assign run_done_pulse = (state == S_DONE);

    // ---------------------------------------------------------------- cluster
    wire        cl_cfg_valid, cl_cfg_ready;
    wire [W-1:0] cl_cfg_data;
    wire        cl_in_valid, cl_in_ready;
    wire [W-1:0] cl_in_a, cl_in_b;
    wire        cl_out_valid, cl_out_ready, cl_out_last, cl_idle;
    wire [W-1:0] cl_out_z;

    unifl_mm_cluster #(.W(W), .D(D), .N(N)) cluster (
        .clk(ap_clk), .rst_n(rst_n_q),
        .cfg_valid(cl_cfg_valid), .cfg_ready(cl_cfg_ready), .cfg_data(cl_cfg_data),
        .in_valid(cl_in_valid), .in_ready(cl_in_ready), .in_a(cl_in_a), .in_b(cl_in_b), .in_mb(1'b0),
        .out_valid(cl_out_valid), .out_ready(cl_out_ready), .out_z(cl_out_z),
        .out_last(cl_out_last), .idle(cl_idle));

    // ---------------------------------------------------------------- burst length helper
    // beats left in the 4 KiB page of a word address (1 .. PAGE_WORDS)
    function [9:0] page_room(input [63:0] addr);
        page_room = PAGE_WORDS - addr[11:3];
    endfunction

    // ---------------------------------------------------------------- read address channel
    reg  [63:0] rd_addr_a, rd_addr_b, rd_addr_c;     // next a / b / consts word address
    reg  [39:0] rd_left;                             // a (= b) words not yet requested
    reg  [8:0]  cfg_left;                            // consts words not yet requested
    reg  [8:0]  cfg_beats;                           // consts words not yet passed to cfg
    reg  [FA:0] credit_used;                         // words reserved in each of the a / b FIFOs
    reg         ar_valid;
    reg  [63:0] ar_addr;
    reg  [8:0]  ar_beats;                            // beats of the burst being offered (1..256)
    reg  [1:0]  ar_kind;                             // 0: consts, 1: a, 2: b
    reg  [8:0]  pair_beats;                          // length of the a/b pair being issued

    localparam [1:0] K_C = 2'd0, K_A = 2'd1, K_B = 2'd2;

    // length of the next a/b pair: words left, MAX_BURST, and the page room of both addresses
    wire [9:0]  room_a = page_room(rd_addr_a);
    wire [9:0]  room_b = page_room(rd_addr_b);
    wire [9:0]  room_ab = (room_a < room_b) ? room_a : room_b;
    wire [9:0]  cap_ab = (room_ab < MAX_BURST) ? room_ab : MAX_BURST[9:0];
    wire [8:0]  next_pair = (rd_left < cap_ab) ? rd_left[8:0] : cap_ab[8:0];
    wire [9:0]  room_c = page_room(rd_addr_c);
    wire [8:0]  next_cfg = (cfg_left < room_c) ? cfg_left : room_c[8:0];
    wire        pop_ab;                               // a word pair went into the cluster
    // a new pair may be issued when its words fit in what is not yet reserved in the FIFOs
    wire        issue_pair = (state == S_RUN) && !ar_valid && (rd_left != 0)
                             && ({1'b0, credit_used} + next_pair <= FIFO_DEPTH);

    assign m_axi_gmem_ARVALID = ar_valid;
    assign m_axi_gmem_ARADDR  = ar_addr[C_M_AXI_GMEM_ADDR_WIDTH-1:0];
    assign m_axi_gmem_ARLEN   = ar_beats - 9'd1;
    assign m_axi_gmem_ARSIZE  = 3'd3;                // 8 bytes per beat
    assign m_axi_gmem_ARBURST = 2'b01;               // INCR

    // ---------------------------------------------------------------- R routing and FIFOs
    reg [W-1:0] fifo_a [0:FIFO_DEPTH-1];
    reg [W-1:0] fifo_b [0:FIFO_DEPTH-1];
    reg [W-1:0] fifo_o [0:FIFO_DEPTH-1];
    reg [FA:0]  a_wr, a_rd, b_wr, b_rd, o_wr, o_rd;
    wire [FA:0] a_count = a_wr - a_rd;
    wire [FA:0] b_count = b_wr - b_rd;
    wire [FA:0] o_count = o_wr - o_rd;
    reg         r_to_b;                               // the R burst in progress is a b burst

    wire r_cfg = (state == S_CFG);
    // in S_CFG every R beat is a word of m for the cfg port; in S_RUN R beats fill the FIFOs
    // (space is reserved by the credits, so the FIFO-full terms never stall a legal stream)
    assign m_axi_gmem_RREADY = r_cfg ? cl_cfg_ready
                             : (state == S_RUN) && (r_to_b ? (b_count != FIFO_DEPTH)
                                                           : (a_count != FIFO_DEPTH));
    wire r_fire = m_axi_gmem_RVALID && m_axi_gmem_RREADY;

    assign cl_cfg_valid = (r_cfg && m_axi_gmem_RVALID) || (state == S_N0);
    assign cl_cfg_data  = (state == S_N0) ? run_n0 : m_axi_gmem_RDATA;

    assign cl_in_valid = (state == S_RUN) && (a_count != 0) && (b_count != 0);
    assign cl_in_a = fifo_a[a_rd[FA-1:0]];
    assign cl_in_b = fifo_b[b_rd[FA-1:0]];
    assign pop_ab = cl_in_valid && cl_in_ready;

    assign cl_out_ready = (o_count != FIFO_DEPTH);
    wire push_o = cl_out_valid && cl_out_ready;

    always @(posedge ap_clk) begin
        if (r_fire && state == S_RUN) begin
            if (r_to_b) fifo_b[b_wr[FA-1:0]] <= m_axi_gmem_RDATA;
            else        fifo_a[a_wr[FA-1:0]] <= m_axi_gmem_RDATA;
        end
        if (push_o) fifo_o[o_wr[FA-1:0]] <= cl_out_z;
    end

    // ---------------------------------------------------------------- write side
    reg  [63:0] wr_addr;
    reg  [39:0] wr_left;                              // words not yet covered by an issued burst
    reg         aw_valid, w_active;
    reg  [63:0] aw_addr;
    reg  [8:0]  w_beats, w_sent;
    reg  [31:0] bursts_issued, bursts_acked;
    wire [9:0]  room_w = page_room(wr_addr);
    wire [9:0]  cap_w = (room_w < MAX_BURST) ? room_w : MAX_BURST[9:0];
    wire [8:0]  next_w = (wr_left < cap_w) ? wr_left[8:0] : cap_w[8:0];

    assign m_axi_gmem_AWVALID = aw_valid;
    assign m_axi_gmem_AWADDR  = aw_addr[C_M_AXI_GMEM_ADDR_WIDTH-1:0];
    assign m_axi_gmem_AWLEN   = w_beats - 9'd1;
    assign m_axi_gmem_AWSIZE  = 3'd3;
    assign m_axi_gmem_AWBURST = 2'b01;
    assign m_axi_gmem_WVALID  = w_active && (w_sent != w_beats);
    assign m_axi_gmem_WDATA   = poison ? {W{1'b1}} : fifo_o[o_rd[FA-1:0]];
    assign m_axi_gmem_WSTRB   = {(C_M_AXI_GMEM_DATA_WIDTH/8){1'b1}};
    assign m_axi_gmem_WLAST   = (w_sent == w_beats - 9'd1);
    assign m_axi_gmem_BREADY  = 1'b1;
    wire w_fire = m_axi_gmem_WVALID && m_axi_gmem_WREADY;
    wire aw_fire = aw_valid && m_axi_gmem_AWREADY;
    // the burst on W is complete once its AW was taken and its last beat went out
    wire w_burst_end = w_active && !aw_valid && (w_sent == w_beats);

    // ---------------------------------------------------------------- main sequencer
    always @(posedge ap_clk) begin
        if (!rst_n_q) begin
            state <= S_IDLE;
            ar_valid <= 1'b0; aw_valid <= 1'b0; w_active <= 1'b0;
            a_wr <= 0; a_rd <= 0; b_wr <= 0; b_rd <= 0; o_wr <= 0; o_rd <= 0;
            r_to_b <= 1'b0; credit_used <= 0;
            rd_left <= 0; cfg_left <= 0; cfg_beats <= 0; wr_left <= 0;
            bursts_issued <= 0; bursts_acked <= 0;
            w_beats <= 9'd1; w_sent <= 0; ar_beats <= 9'd1; ar_kind <= K_C;
            pair_beats <= 0; run_n0 <= 0;  status <= 2'b00;  poison <= 1'b0;
        end else begin
            // ---------------- FIFO pointers and R routing
            if (r_fire && state == S_RUN) begin
                if (r_to_b) b_wr <= b_wr + 1'b1; else a_wr <= a_wr + 1'b1;
                if (m_axi_gmem_RLAST) r_to_b <= !r_to_b;
            end
            if (pop_ab) begin
                a_rd <= a_rd + 1'b1;
                b_rd <= b_rd + 1'b1;
            end
            if (push_o) o_wr <= o_wr + 1'b1;
            if (w_fire) o_rd <= o_rd + 1'b1;
            if (m_axi_gmem_BVALID) begin
                bursts_acked <= bursts_acked + 1'b1;
                if (m_axi_gmem_BRESP != 2'b00) status[1] <= 1'b1;
            end
            if (r_fire && m_axi_gmem_RRESP != 2'b00) begin
                status[0] <= 1'b1;  poison <= 1'b1;
            end

            case (state)
            S_IDLE: if (reg_start) begin
                run_n0      <= arg_n0;
                rd_addr_a   <= arg_a;
                rd_addr_b   <= arg_b;
                rd_addr_c   <= arg_consts;
                wr_addr     <= arg_out;
                rd_left     <= arg_n * D;
                wr_left     <= arg_n * D;
                cfg_left    <= D;
                cfg_beats   <= D;
                r_to_b      <= 1'b0;
                status      <= 2'b00;
                poison      <= 1'b0;
                bursts_issued <= 0;
                bursts_acked  <= 0;
                // no rows: nothing to read or write (the cluster keeps its last modulus)
                state <= (arg_n == 32'd0) ? S_DONE : S_CFG;
            end
            S_CFG: begin
                // consts bursts (usually one; two if m straddles a 4 KiB boundary)
                if (!ar_valid && cfg_left != 0) begin
                    ar_valid <= 1'b1; ar_addr <= rd_addr_c; ar_beats <= next_cfg; ar_kind <= K_C;
                    rd_addr_c <= rd_addr_c + {next_cfg, 3'b000};
                    cfg_left  <= cfg_left - next_cfg;
                end else if (ar_valid && m_axi_gmem_ARREADY) begin
                    ar_valid <= 1'b0;
                end
                if (r_fire) begin
                    cfg_beats <= cfg_beats - 1'b1;
                    if (cfg_beats == 9'd1) state <= S_N0;
                end
            end
            S_N0: if (cl_cfg_ready) state <= S_RUN;       // the n0 beat is taken on this edge
            S_RUN: begin
                // ---------------- a/b read pairs
                if (ar_valid) begin
                    if (m_axi_gmem_ARREADY) begin
                        if (ar_kind == K_A) begin
                            // the b burst of the pair, same length
                            ar_addr <= rd_addr_b; ar_kind <= K_B;
                            rd_addr_b <= rd_addr_b + {pair_beats, 3'b000};
                        end else begin
                            ar_valid <= 1'b0;
                        end
                    end
                end else if (issue_pair) begin
                    ar_valid <= 1'b1; ar_addr <= rd_addr_a; ar_beats <= next_pair; ar_kind <= K_A;
                    pair_beats <= next_pair;
                    rd_addr_a <= rd_addr_a + {next_pair, 3'b000};
                    rd_left   <= rd_left - next_pair;
                end
                // ---------------- write bursts: AW and W offered together once the data is there
                if (!w_active && wr_left != 0 && o_count >= next_w) begin
                    w_active <= 1'b1; aw_valid <= 1'b1; aw_addr <= wr_addr;
                    w_beats <= next_w; w_sent <= 0;
                    wr_addr <= wr_addr + {next_w, 3'b000};
                    wr_left <= wr_left - next_w;
                    bursts_issued <= bursts_issued + 1'b1;
                end else begin
                    if (aw_fire) aw_valid <= 1'b0;
                    if (w_fire) w_sent <= w_sent + 1'b1;
                    if (w_burst_end) w_active <= 1'b0;
                end
                // ---------------- done: every word written and every response back
                if (wr_left == 0 && !w_active && bursts_acked == bursts_issued)
                    state <= S_DONE;
            end
            S_DONE: state <= S_IDLE;
            default: state <= S_IDLE;
            endcase

            // credits: reserved when an a/b pair is issued, freed as word pairs enter the cluster
            credit_used <= credit_used + (issue_pair ? next_pair : 9'd0) - (pop_ab ? 1'b1 : 1'b0);
        end
    end
endmodule

// The kernel names the host launches: montmul_L<limbs> (the top module name is the kernel
// name).  Both tops have the same ports; only D differs.

`define UNIFL_VITIS_MONTMUL_TOP(TOP, WORDS) \
module TOP #(parameter integer N = 4, parameter integer FIFO_DEPTH = 512, \
            parameter integer MAX_BURST = 256) ( \
    input wire ap_clk, \
    input wire ap_rst_n, \
    output wire interrupt, \
    output wire m_axi_gmem_AWVALID, \
    input wire m_axi_gmem_AWREADY, \
    output wire [63:0] m_axi_gmem_AWADDR, \
    output wire [7:0] m_axi_gmem_AWLEN, \
    output wire [2:0] m_axi_gmem_AWSIZE, \
    output wire [1:0] m_axi_gmem_AWBURST, \
    output wire m_axi_gmem_WVALID, \
    input wire m_axi_gmem_WREADY, \
    output wire [63:0] m_axi_gmem_WDATA, \
    output wire [7:0] m_axi_gmem_WSTRB, \
    output wire m_axi_gmem_WLAST, \
    input wire m_axi_gmem_BVALID, \
    output wire m_axi_gmem_BREADY, \
    input wire [1:0] m_axi_gmem_BRESP, \
    output wire m_axi_gmem_ARVALID, \
    input wire m_axi_gmem_ARREADY, \
    output wire [63:0] m_axi_gmem_ARADDR, \
    output wire [7:0] m_axi_gmem_ARLEN, \
    output wire [2:0] m_axi_gmem_ARSIZE, \
    output wire [1:0] m_axi_gmem_ARBURST, \
    input wire m_axi_gmem_RVALID, \
    output wire m_axi_gmem_RREADY, \
    input wire [63:0] m_axi_gmem_RDATA, \
    input wire [1:0] m_axi_gmem_RRESP, \
    input wire m_axi_gmem_RLAST, \
    input wire s_axi_control_AWVALID, \
    output wire s_axi_control_AWREADY, \
    input wire [11:0] s_axi_control_AWADDR, \
    input wire s_axi_control_WVALID, \
    output wire s_axi_control_WREADY, \
    input wire [31:0] s_axi_control_WDATA, \
    input wire [3:0] s_axi_control_WSTRB, \
    input wire s_axi_control_ARVALID, \
    output wire s_axi_control_ARREADY, \
    input wire [11:0] s_axi_control_ARADDR, \
    output wire s_axi_control_RVALID, \
    input wire s_axi_control_RREADY, \
    output wire [31:0] s_axi_control_RDATA, \
    output wire [1:0] s_axi_control_RRESP, \
    output wire s_axi_control_BVALID, \
    input wire s_axi_control_BREADY, \
    output wire [1:0] s_axi_control_BRESP \
); \
    unifl_vitis_montmul #(.D(WORDS), .N(N), .FIFO_DEPTH(FIFO_DEPTH), .MAX_BURST(MAX_BURST)) core ( \
        .ap_clk(ap_clk), .ap_rst_n(ap_rst_n), .interrupt(interrupt), .m_axi_gmem_AWVALID(m_axi_gmem_AWVALID), \
        .m_axi_gmem_AWREADY(m_axi_gmem_AWREADY), .m_axi_gmem_AWADDR(m_axi_gmem_AWADDR), .m_axi_gmem_AWLEN(m_axi_gmem_AWLEN), .m_axi_gmem_AWSIZE(m_axi_gmem_AWSIZE), \
        .m_axi_gmem_AWBURST(m_axi_gmem_AWBURST), .m_axi_gmem_WVALID(m_axi_gmem_WVALID), .m_axi_gmem_WREADY(m_axi_gmem_WREADY), .m_axi_gmem_WDATA(m_axi_gmem_WDATA), \
        .m_axi_gmem_WSTRB(m_axi_gmem_WSTRB), .m_axi_gmem_WLAST(m_axi_gmem_WLAST), .m_axi_gmem_BVALID(m_axi_gmem_BVALID), .m_axi_gmem_BREADY(m_axi_gmem_BREADY), \
        .m_axi_gmem_BRESP(m_axi_gmem_BRESP), .m_axi_gmem_ARVALID(m_axi_gmem_ARVALID), .m_axi_gmem_ARREADY(m_axi_gmem_ARREADY), .m_axi_gmem_ARADDR(m_axi_gmem_ARADDR), \
        .m_axi_gmem_ARLEN(m_axi_gmem_ARLEN), .m_axi_gmem_ARSIZE(m_axi_gmem_ARSIZE), .m_axi_gmem_ARBURST(m_axi_gmem_ARBURST), .m_axi_gmem_RVALID(m_axi_gmem_RVALID), \
        .m_axi_gmem_RREADY(m_axi_gmem_RREADY), .m_axi_gmem_RDATA(m_axi_gmem_RDATA), .m_axi_gmem_RRESP(m_axi_gmem_RRESP), .m_axi_gmem_RLAST(m_axi_gmem_RLAST), \
        .s_axi_control_AWVALID(s_axi_control_AWVALID), .s_axi_control_AWREADY(s_axi_control_AWREADY), .s_axi_control_AWADDR(s_axi_control_AWADDR), .s_axi_control_WVALID(s_axi_control_WVALID), \
        .s_axi_control_WREADY(s_axi_control_WREADY), .s_axi_control_WDATA(s_axi_control_WDATA), .s_axi_control_WSTRB(s_axi_control_WSTRB), .s_axi_control_ARVALID(s_axi_control_ARVALID), \
        .s_axi_control_ARREADY(s_axi_control_ARREADY), .s_axi_control_ARADDR(s_axi_control_ARADDR), .s_axi_control_RVALID(s_axi_control_RVALID), .s_axi_control_RREADY(s_axi_control_RREADY), \
        .s_axi_control_RDATA(s_axi_control_RDATA), .s_axi_control_RRESP(s_axi_control_RRESP), .s_axi_control_BVALID(s_axi_control_BVALID), .s_axi_control_BREADY(s_axi_control_BREADY), \
        .s_axi_control_BRESP(s_axi_control_BRESP) \
    ); \
endmodule

`UNIFL_VITIS_MONTMUL_TOP(montmul_L16, 16)
`UNIFL_VITIS_MONTMUL_TOP(montmul_L32, 32)

`undef UNIFL_VITIS_MONTMUL_TOP
`default_nettype wire
