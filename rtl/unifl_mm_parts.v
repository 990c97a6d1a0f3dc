`timescale 1ns/1ps
// Building blocks of the UniFL MontMult engine (rtl/unifl_mm_engine.v): a LUT RAM, a pipelined
// adder tree and a pipelined low-half multiplier.  Each is written so that synthesis maps it to the
// intended primitive (distributed RAM, carry chains with a register after every level, DSP blocks
// with their internal registers) and no path has more than one adder or one DSP between registers.

// Distributed (LUT) RAM: one synchronous write port, one asynchronous read port.  On UltraScale+
// a 32 x 64 instance is eleven RAM32M-class cells instead of 2048 flip-flops behind a 32:1 mux.
module unifl_mm_ram #(
    parameter integer DW = 64,   // data width
    parameter integer AW = 5     // address width: 2^AW words
) (
    input  wire          clk,
    input  wire          we,
    input  wire [AW-1:0] wa,
    input  wire [DW-1:0] wd,
    input  wire [AW-1:0] ra,
    output wire [DW-1:0] rd
);
    reg [DW-1:0] mem [0:(1 << AW) - 1];
    always @(posedge clk)
        if (we) mem[wa] <= wd;
    assign rd = mem[ra];
endmodule

// Pipelined binary adder tree: sum = leaves[0] + ... + leaves[N-1] mod 2^WS, one register after
// every level, LAT = ceil(log2 N) cycles from the leaves (combinational inputs) to `sum`.  The
// tree is complete (N padded with zeros to a power of two) so every leaf has the same latency;
// constant-zero leaves and the adders they feed are removed by synthesis.
module unifl_mm_sum #(
    parameter integer N  = 13,   // leaves
    parameter integer WS = 72    // width of every node (the caller bounds the sum below 2^WS)
) (
    input  wire            clk,
    input  wire [N*WS-1:0] leaves,
    output wire [WS-1:0]   sum
);
    function integer clog2(input integer v);
        integer k;
        begin
            clog2 = 0;
            for (k = v - 1; k > 0; k = k >> 1) clog2 = clog2 + 1;
        end
    endfunction
    localparam integer L  = (N < 2) ? 1 : clog2(N);
    localparam integer NP = 1 << L;                // leaves after padding
    // heap layout: node k has children 2k+1 and 2k+2; leaves are nodes NP-1 .. 2NP-2
    wire [(2*NP-1)*WS-1:0] node;
    genvar k;
    generate
        for (k = 0; k < NP; k = k + 1) begin : leaf
            if (k < N) begin : used
                assign node[(NP-1+k)*WS +: WS] = leaves[k*WS +: WS];
            end else begin : pad
                assign node[(NP-1+k)*WS +: WS] = {WS{1'b0}};
            end
        end
        for (k = 0; k < NP - 1; k = k + 1) begin : add
            reg [WS-1:0] r;
            always @(posedge clk)
                r <= node[(2*k+1)*WS +: WS] + node[(2*k+2)*WS +: WS];
            assign node[k*WS +: WS] = r;
        end
    endgenerate
    assign sum = node[0 +: WS];
endmodule

// r = x * y mod 2^W, pipelined: x and y are sampled on the clock edge that ends the issue cycle,
// r is valid LAT = 3 + ceil(log2 NQ) cycles later.  The product is split into TA x TB tiles
// (26 x 17 bits: one DSP48E2 each, its 27 x 18 signed multiplier used unsigned); only the NQ tiles
// whose offset lies below 2^W are built -- the others contribute nothing modulo 2^W.
// Registers: tile operands (the DSP's A/B registers), product (M register), product again (P
// register), then one register per adder level.
// A valid bit and a TG-bit tag travel beside the operands, so the caller never re-derives the
// latency: v_out/tag_out say what r holds now, v_soon/tag_soon what it holds in the next cycle,
// busy whether anything is in flight.
module unifl_mm_lowmul #(
    parameter integer W  = 64,
    parameter integer TA = 26,
    parameter integer TB = 17,
    parameter integer TG = 1
) (
    input  wire          clk,
    input  wire          rst_n,
    input  wire [W-1:0]  x,
    input  wire [W-1:0]  y,
    input  wire          v_in,
    input  wire [TG-1:0] tag_in,
    output wire [W-1:0]  r,
    output wire          v_out,
    output wire [TG-1:0] tag_out,
    output wire          v_soon,
    output wire [TG-1:0] tag_soon,
    output wire          busy
);
    function integer clog2(input integer v);
        integer k;
        begin
            clog2 = 0;
            for (k = v - 1; k > 0; k = k >> 1) clog2 = clog2 + 1;
        end
    endfunction
    localparam integer NA = (W + TA - 1) / TA;
    localparam integer NB = (W + TB - 1) / TB;
    // number of tiles (a, b) with a*TA + b*TB < W
    function integer ntiles(input integer dummy);
        integer a, b;
        begin
            ntiles = 0;
            for (a = 0; a < NA; a = a + 1)
                for (b = 0; b < NB; b = b + 1)
                    if (a * TA + b * TB < W) ntiles = ntiles + 1;
        end
    endfunction
    // index of tile (a, b) among those kept, in (a, b) order
    function integer tindex(input integer ai, input integer bi);
        integer a, b;
        begin
            tindex = 0;
            for (a = 0; a < NA; a = a + 1)
                for (b = 0; b < NB; b = b + 1)
                    if (a * TA + b * TB < W && (a < ai || (a == ai && b < bi)))
                        tindex = tindex + 1;
        end
    endfunction
    localparam integer NQ  = ntiles(0);
    // operand, product and P registers, then the adder tree's levels (unifl_mm_sum's L)
    localparam integer LAT = 3 + ((NQ < 2) ? 1 : clog2(NQ));

    wire [NA*TA-1:0] xp = {{(NA*TA-W){1'b0}}, x};
    wire [NB*TB-1:0] yp = {{(NB*TB-W){1'b0}}, y};
    wire [NQ*W-1:0] leaves;
    genvar a, b;
    generate
        for (a = 0; a < NA; a = a + 1) begin : ra
            for (b = 0; b < NB; b = b + 1) begin : rb
                if (a * TA + b * TB < W) begin : tile
                    localparam integer O = a * TA + b * TB;
                    reg [TA-1:0]    xr;
                    reg [TB-1:0]    yr;
                    reg [TA+TB-1:0] m, p;
                    always @(posedge clk) begin
                        xr <= xp[a*TA +: TA];
                        yr <= yp[b*TB +: TB];
                        m  <= xr * yr;
                        p  <= m;
                    end
                    wire [W+TA+TB-1:0] sh = {{W{1'b0}}, p} << O;
                    assign leaves[tindex(a, b)*W +: W] = sh[W-1:0];
                end
            end
        end
    endgenerate
    unifl_mm_sum #(.N(NQ), .WS(W)) tree (.clk(clk), .leaves(leaves), .sum(r));

    // the valid / tag pipeline, one stage per register of the datapath
    reg          pv [0:LAT-1];
    reg [TG-1:0] pt [0:LAT-1];
    integer u;
    reg     any;
    always @(posedge clk) begin
        pv[0] <= rst_n && v_in;
        pt[0] <= tag_in;
        for (u = 1; u < LAT; u = u + 1) begin
            pv[u] <= rst_n && pv[u-1];
            pt[u] <= pt[u-1];
        end
    end
    always @(*) begin
        any = 1'b0;
        for (u = 0; u < LAT; u = u + 1) any = any || pv[u];
    end
    assign v_out    = pv[LAT-1];
    assign tag_out  = pt[LAT-1];
    assign v_soon   = pv[LAT-2];
    assign tag_soon = pt[LAT-2];
    assign busy     = any;
endmodule

// Block RAM: port A writes or reads, port B reads; both reads are registered (one cycle from the
// address to the data, read-first on port A), the form that maps to one RAMB36E2 / M20K per
// 512 x 72 (or 1K x 36) of storage.
module unifl_mm_bram #(
    parameter integer DW = 64,
    parameter integer AW = 10
) (
    input  wire          clk,
    input  wire          we_a,
    input  wire [AW-1:0] addr_a,
    input  wire [DW-1:0] wd_a,
    output reg  [DW-1:0] rd_a,
    input  wire [AW-1:0] addr_b,
    output reg  [DW-1:0] rd_b
);
    reg [DW-1:0] mem [0:(1 << AW) - 1];
    always @(posedge clk) begin
        if (we_a) mem[addr_a] <= wd_a;
        rd_a <= mem[addr_a];
    end
    always @(posedge clk)
        rd_b <= mem[addr_b];
endmodule
