`timescale 1ns/1ps
// UniFL MontMult engine: word-serial radix-2^W Montgomery multiplication (FLASH Algorithm 1, CIOS
// in its merged "one pass per word of b" form), Z = A * B * 2^(-W*D) mod M, bit-exact with
// unifl.base_op.mont_mul_ref when W*D = 64*ceil(bits(M)/64) (e.g. W = 64, D = ceil(bits/64)).
//
// Micro-architecture (one engine; an FPGA replicates it, FLASH fit 300 on a VU13P):
//  * two full W x W multipliers: Mul 1 computes A[j]*B[i], Mul 2 computes q_i*M[j], one word step j
//    issued per cycle (the inner loop fully pipelined);
//  * a 2-stage pipeline: stage 1 registers both 2W-bit products, stage 2 adds them to T[j] and the
//    (W+1)-bit carry and writes T[j-1] (T shifts down one word per outer iteration);
//  * the q unit computes q_{i+1} = (T_0 + A_0*B_{i+1}) * n0' mod 2^W during iteration i, as soon as
//    the new T_0 leaves stage 2 (at step j = 1), so the next iteration starts with no bubble: the
//    overlap of UniFL §V-C ("u_{i+1} computed together with step 5").  It has two W x W -> W
//    low-half multipliers of its own, pipelined over two cycles, so none sits in series with Mul 1/2;
//  * the carry chain of the last word is folded into stage 2 of step D-1, so an outer iteration
//    takes P = max(D, 5) cycles (5 leaves the q unit its two cycles for tiny D);
//  * the final conditional subtraction Z = T - M (when T >= M) is word-serial, D cycles, with one
//    borrow bit: no D*W-bit carry chain anywhere in the design.
// Cycles per MontMult from the input handshake to out_valid: 2 + D*P + 1 + D + 1.
//
// Interfaces: the modulus constants (M, n0' = -M^-1 mod 2^W) are loaded through cfg_* once per
// Montgomery context and kept; operands and results stream through valid/ready handshakes (AXI-
// stream style: a transfer happens on a rising edge where valid and ready are both high).
// Invariant (CIOS): T < 2M after every outer iteration, so T fits in D words plus one bit.
module unifl_montmul #(
    parameter integer W = 64,  // word (limb) width: the multiplier size
    parameter integer D = 16   // words per operand: 16 for 1024-bit, 32 for 2048-bit moduli
) (
    input  wire             clk,
    input  wire             rst_n,
    // constants of one modulus
    input  wire             cfg_valid,
    output wire             cfg_ready,
    input  wire [D*W-1:0]   cfg_m,
    input  wire [W-1:0]     cfg_n0,
    // operand stream
    input  wire             in_valid,
    output wire             in_ready,
    input  wire [D*W-1:0]   in_a,
    input  wire [D*W-1:0]   in_b,
    // result stream
    output reg              out_valid,
    input  wire             out_ready,
    output reg  [D*W-1:0]   out_z
);
    localparam integer P = (D < 5) ? 5 : D;   // cycles per outer iteration
    localparam integer JB = 8;                // counter widths (D <= 255)

    localparam [2:0] S_IDLE = 3'd0, S_Q0A = 3'd1, S_Q0B = 3'd2, S_RUN = 3'd3, S_DRAIN = 3'd4,
                     S_SUB = 3'd5, S_OUT = 3'd6;

    reg [2:0] state;
    reg [W-1:0] a_mem [0:D-1];
    reg [W-1:0] b_mem [0:D-1];
    reg [W-1:0] m_mem [0:D-1];
    reg [W-1:0] t_mem [0:D];       // T: D words plus the top word (0 or 1)
    reg [W-1:0] n0;

    reg [JB-1:0] i_cnt;            // outer index (word of B)
    reg [JB-1:0] j_cnt;            // issue index within the iteration, 0..P-1
    reg [W-1:0]  q;                // q_i used by Mul 2 during iteration i
    reg [W-1:0]  q_next;           // q_{i+1}, ready from step j = 4 of iteration i
    reg [W-1:0]  qa;               // A_0 * B_{i+1} mod 2^W (first half of the q unit)

    // stage-1 registers
    reg            s1_valid;
    reg [JB-1:0]   s1_j;
    reg [2*W-1:0]  s1_p1, s1_p2;
    reg [W:0]      carry;          // (W+1)-bit carry between word steps
    reg            borrow;

    integer k;

    assign cfg_ready = (state == S_IDLE);
    assign in_ready  = (state == S_IDLE);

    // ---- combinational datapath
    wire           issue = (state == S_RUN) && (j_cnt < D);
    wire [2*W-1:0] mul1 = a_mem[j_cnt] * b_mem[i_cnt];                  // Mul 1
    wire [2*W-1:0] mul2 = q * m_mem[j_cnt];                             // Mul 2
    // stage 2: S = p1 + p2 + T[j] + carry  (< 2^(2W+1))
    wire [2*W+1:0] s2_sum = {2'b00, s1_p1} + {2'b00, s1_p2}
                          + {{(W+2){1'b0}}, t_mem[s1_j]} + {{(W+1){1'b0}}, carry};
    wire [W+1:0]   s2_hi  = s2_sum[2*W+1:W];
    // top of the last word step: T[D-1..D] = T[D] + carry_out
    wire [W+1:0]   s2_top = {2'b00, t_mem[D]} + s2_hi;
    // the q unit
    wire [2*W-1:0] qa_full = a_mem[0] * b_mem[(i_cnt + 1 < D) ? i_cnt + 1 : 0];
    wire [2*W-1:0] qn_full = (t_mem[0] + qa) * n0;
    wire [2*W-1:0] q0_full = qa * n0;                                    // iteration 0: T = 0
    // word-serial final subtraction
    wire [W+1:0]   sub_w = {2'b00, t_mem[j_cnt]} - {2'b00, m_mem[j_cnt]} - {{(W+1){1'b0}}, borrow};

    always @(posedge clk) begin
        if (!rst_n) begin
            state     <= S_IDLE;
            out_valid <= 1'b0;
            s1_valid  <= 1'b0;
        end else begin
            // ---- stage 2 (runs whenever stage 1 holds a word step)
            if (s1_valid) begin
                if (s1_j != 0)
                    t_mem[s1_j - 1] <= s2_sum[W-1:0];                  // low word is 0 at j = 0
                if (s1_j == D - 1) begin
                    t_mem[D-1] <= s2_top[W-1:0];
                    t_mem[D]   <= {{(W-2){1'b0}}, s2_top[W+1:W]};
                    carry      <= {(W+1){1'b0}};                       // next iteration starts clean
                end else begin
                    carry <= s2_hi[W:0];
                end
            end
            // ---- stage 1
            s1_valid <= issue;
            if (issue) begin
                s1_j  <= j_cnt;
                s1_p1 <= mul1;
                s1_p2 <= mul2;
            end

            case (state)
            S_IDLE: begin
                if (cfg_valid) begin
                    for (k = 0; k < D; k = k + 1) m_mem[k] <= cfg_m[k*W +: W];
                    n0 <= cfg_n0;
                end
                if (in_valid) begin
                    for (k = 0; k < D; k = k + 1) begin
                        a_mem[k] <= in_a[k*W +: W];
                        b_mem[k] <= in_b[k*W +: W];
                    end
                    for (k = 0; k <= D; k = k + 1) t_mem[k] <= {W{1'b0}};
                    carry <= {(W+1){1'b0}};
                    i_cnt <= {JB{1'b0}};
                    state <= S_Q0A;
                end
            end
            S_Q0A: begin                         // qa = A_0 * B_0
                qa    <= a_mem[0] * b_mem[0];
                state <= S_Q0B;
            end
            S_Q0B: begin                         // q_0 = qa * n0'
                q     <= q0_full[W-1:0];
                j_cnt <= {JB{1'b0}};
                state <= S_RUN;
            end
            S_RUN: begin
                if (j_cnt == 0)
                    qa <= qa_full[W-1:0];                              // A_0 * B_{i+1}
                if (j_cnt == 3)
                    q_next <= qn_full[W-1:0];                          // T_0 is new from here
                if (j_cnt == P - 1) begin
                    j_cnt <= {JB{1'b0}};
                    q     <= q_next;
                    if (i_cnt == D - 1)
                        state <= S_DRAIN;
                    else
                        i_cnt <= i_cnt + 1'b1;
                end else begin
                    j_cnt <= j_cnt + 1'b1;
                end
            end
            S_DRAIN: begin                       // the last word step leaves stage 2
                if (!s1_valid) begin
                    j_cnt  <= {JB{1'b0}};
                    borrow <= 1'b0;
                    state  <= S_SUB;
                end
            end
            S_SUB: begin                         // out_z = T - M word by word, then choose
                out_z[j_cnt*W +: W] <= sub_w[W-1:0];
                borrow <= sub_w[W+1];
                if (j_cnt == D - 1) begin
                    state <= S_OUT;
                end else begin
                    j_cnt <= j_cnt + 1'b1;
                end
            end
            S_OUT: begin
                // T >= M  <=>  top word set or no borrow out of the subtraction
                if (!out_valid) begin
                    if (t_mem[D] == 0 && borrow)
                        for (k = 0; k < D; k = k + 1) out_z[k*W +: W] <= t_mem[k];
                    out_valid <= 1'b1;
                end else if (out_ready) begin
                    out_valid <= 1'b0;
                    state     <= S_IDLE;
                end
            end
            default: state <= S_IDLE;
            endcase
        end
    end
endmodule
