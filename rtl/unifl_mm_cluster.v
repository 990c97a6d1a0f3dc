`timescale 1ns/1ps
`default_nettype none
// N UniFL MontMult engines (rtl/unifl_mm_engine.v) behind the port set of one engine.
//
//  * modulus: one cfg stream broadcast to every engine -- a beat moves only when all of them are
//    ready, so they always hold the same modulus; it crosses the interconnect once per batch, as
//    D + 1 words, whatever N is;
//  * operands: each MontMult's D beats go to one engine, the engines taken in turn (round-robin);
//  * results: taken from the engines in the same turn, so they leave in the order operands came
//    (every engine has the same data-independent latency, and each keeps its own order).
// The operand and cfg words reach every engine on one W-bit bus; only the result side has an
// N:1 multiplexer.  With the engine's initiation interval I (D*max(D,17) cycles, about), N
// engines accept a MontMult every max(D, I/N) cycles: beyond N = I/D the D-beat operand stream
// is the limit, so a card instantiates several clusters side by side.
module unifl_mm_cluster #(
    parameter integer W = 64,
    parameter integer D = 16,
    parameter integer N = 4,
    parameter integer NM = 1,                        // modulus banks per engine
    parameter integer MBW = (NM < 2) ? 1 : $clog2(NM)  // width of a bank index (do not set)
) (
    input  wire         clk,
    input  wire         rst_n,
    input  wire         cfg_valid,
    output wire         cfg_ready,
    input  wire [W-1:0] cfg_data,
    input  wire         in_valid,
    output wire         in_ready,
    input  wire [W-1:0] in_a,
    input  wire [W-1:0] in_b,
    input  wire [MBW-1:0] in_mb,
    output wire         out_valid,
    input  wire         out_ready,
    output wire [W-1:0] out_z,
    output wire         out_last,
    output wire         idle
);
    function integer clog2(input integer v);
        integer k;
        begin
            clog2 = 0;
            for (k = v - 1; k > 0; k = k >> 1) clog2 = clog2 + 1;
        end
    endfunction
    localparam integer NW = (N < 2) ? 1 : clog2(N);
    localparam integer JW = (D < 2) ? 1 : clog2(D);

    wire [N-1:0]   e_cfg_ready, e_in_ready, e_out_valid, e_out_last, e_idle;
    wire [N*W-1:0] e_out_z;
    reg  [NW-1:0]  ip, op;          // engine taking operands / giving results
    reg  [JW-1:0]  ib;              // operand beat within the MontMult

    assign cfg_ready = &e_cfg_ready;
    assign in_ready  = e_in_ready[ip];
    assign out_valid = e_out_valid[op];
    assign out_last  = e_out_last[op];
    assign out_z     = e_out_z[op*W +: W];
    assign idle      = &e_idle;

    genvar k;
    generate
        for (k = 0; k < N; k = k + 1) begin : eng
            unifl_mm_engine #(.W(W), .D(D), .NM(NM)) engine (
                .clk(clk), .rst_n(rst_n),
                .cfg_valid(cfg_valid && cfg_ready), .cfg_ready(e_cfg_ready[k]),
                .cfg_data(cfg_data),
                .in_valid(in_valid && ip == k), .in_ready(e_in_ready[k]),
                .in_a(in_a), .in_b(in_b), .in_mb(in_mb),
                .out_valid(e_out_valid[k]), .out_ready(out_ready && op == k),
                .out_z(e_out_z[k*W +: W]), .out_last(e_out_last[k]), .idle(e_idle[k]));
        end
    endgenerate

    always @(posedge clk) begin
        if (!rst_n) begin
            ip <= {NW{1'b0}};  op <= {NW{1'b0}};  ib <= {JW{1'b0}};
        end else begin
            if (in_valid && in_ready) begin
                if (ib == D - 1) begin
                    ib <= {JW{1'b0}};
                    ip <= (ip == N - 1) ? {NW{1'b0}} : ip + 1'b1;
                end else begin
                    ib <= ib + 1'b1;
                end
            end
            if (out_valid && out_ready && out_last)
                op <= (op == N - 1) ? {NW{1'b0}} : op + 1'b1;
        end
    end
endmodule
`default_nettype wire
