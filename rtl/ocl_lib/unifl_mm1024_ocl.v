`timescale 1ns/1ps
// OpenCL RTL-library wrapper of the UniFL MontMult engine for 1024-bit moduli (D = 16 words of 64):
// the port set an FPGA OpenCL compiler expects of a library function with a handshaking (not
// stall-free) interface -- clock, resetn, ivalid/iready, ovalid/oready, one data port per argument
// and `result` -- see unifl_mm1024.xml for the spec and unifl_mm1024.cl for the emulation model.
//
// The OpenCL function is stateless, so the modulus and n0' travel with every call; the engine
// latches them in the same cycle as the operands (its cfg and operand ports are both open in IDLE).
module unifl_mm1024_ocl (
    input  wire          clock,
    input  wire          resetn,
    input  wire          ivalid,
    output wire          iready,
    output wire          ovalid,
    input  wire          oready,
    input  wire [1023:0] a,
    input  wire [1023:0] b,
    input  wire [1023:0] m,
    input  wire [63:0]   n0,
    output wire [1023:0] result
);
    wire cfg_ready_unused;
    unifl_montmul #(.W(64), .D(16)) engine (
        .clk(clock), .rst_n(resetn),
        .cfg_valid(ivalid), .cfg_ready(cfg_ready_unused), .cfg_m(m), .cfg_n0(n0),
        .in_valid(ivalid), .in_ready(iready), .in_a(a), .in_b(b),
        .out_valid(ovalid), .out_ready(oready), .out_z(result));
endmodule
