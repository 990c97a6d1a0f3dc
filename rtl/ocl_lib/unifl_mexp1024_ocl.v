`timescale 1ns/1ps
// Intel FPGA SDK for OpenCL RTL-library module behind the OpenCL function
//     ulong16 unifl_mexp1024(ulong16 x, ulong16 e, ulong16 m, ulong16 r_mod, ulong n0, uint ebits);
//     result = x^e R mod m for x = x R mod m given (Montgomery form in and out, R = 2^1024),
//     e = the low ebits bits of the 16 words of e (ebits <= 1024), r_mod = R mod m,
//     n0 = -m^-1 mod 2^64; x may be any value below 2^1024 (reduced on entry)
// built on the exponentiation unit rtl/unifl_modexp.v (NE engines, W = 64, D = 16, K = 4-bit
// windows, two exponentiations interleaved per engine).  Spec: unifl_mexp1024.xml.  The port
// rules are those of unifl_mm1024_ocl.v (Intel's RTL-module interface: ivalid in / oready out
// for the call, ovalid out / iready in for the result; the caller holds a call until oready).
//
// A call streams from the held ports into the unit: a job header (ceil(ebits / 4) windows,
// Montgomery entry and exit), the 16 words of x, then the ceil(ebits / 64) exponent words, and
// oready rises for one cycle.  The key context (m, n0, R mod m) comes with every call; when it
// differs from the loaded one the module waits until the unit holds no job (every earlier result
// taken), sends it (m, n0, R mod m and two unused constants: 4 D + 1 cfg beats), then the call.
// Results leave in call order.  The unit runs up to 2 NE calls at once; their MontMults are
// interleaved so each engine starts one every interval.
module unifl_mexp1024_ocl #(
    parameter integer NE = 1              // engines in the unit
) (
    input  wire          clock,
    input  wire          resetn,
    input  wire          ivalid,
    output wire          oready,
    output wire          ovalid,
    input  wire          iready,
    input  wire [1023:0] x,
    input  wire [1023:0] e,
    input  wire [1023:0] m,
    input  wire [1023:0] r_mod,
    input  wire [63:0]   n0,
    input  wire [31:0]   ebits,
    output wire [1023:0] result
);
    localparam integer W = 64;
    localparam integer D = 16;
    localparam integer K = 4;
    localparam [1:0] ST_JOB = 2'd0, ST_CFG = 2'd1, ST_ACK = 2'd2;

    reg  [1:0]    state;
    reg  [6:0]    beat;
    reg           ctx_loaded;
    reg  [1023:0] lm, lr;
    reg  [63:0]   ln0;
    wire          same_ctx = ctx_loaded && m == lm && r_mod == lr && n0 == ln0;
    wire [15:0]   nwin = (ebits == 0) ? 16'd1 : ebits[15:0] + K - 1 >> 2;
    wire [6:0]    ew = ({3'd0, nwin} * K + W - 1) / W;         // exponent words of the call
    wire [6:0]    job_beats = 1 + D + ew;

    wire          u_cfg_ready, u_in_ready, u_out_valid, u_out_last, u_idle;
    wire [W-1:0]  u_out_data;
    wire          u_cfg_valid = state == ST_CFG && ivalid;
    wire [W-1:0]  u_cfg_data = (beat < D) ? m[beat[3:0]*W +: W]
                             : (beat == D) ? n0
                             : (beat <= 2 * D) ? r_mod[(beat - D - 1) * W +: W] : {W{1'b0}};
    wire          u_in_valid = state == ST_JOB && ivalid && (beat != 0 || same_ctx);
    wire [W-1:0]  u_in_data = (beat == 0) ? {32'd0, nwin, 16'd0}        // MODEXP, Montgomery in/out
                            : (beat <= D) ? x[(beat - 1) * W +: W]
                            : e[(beat - D - 1) * W +: W];

    // result assembly, as in unifl_mm1024_ocl.v
    reg  [W*(D-1)-1:0] partial;
    reg  [1023:0] result_r;
    reg           result_valid;
    reg  [4:0]    obeat;
    wire          last_word   = obeat == D - 1;
    wire          u_out_ready = !last_word || !result_valid || iready;
    wire          taken       = result_valid && iready;

    assign oready = resetn && state == ST_ACK;
    assign ovalid = resetn && result_valid;
    assign result = result_r;

    unifl_modexp #(.W(W), .D(D), .NE(NE), .S(2), .K(K), .NM(1)) unit (
        .clk(clock), .rst_n(resetn),
        .cfg_valid(u_cfg_valid), .cfg_ready(u_cfg_ready), .cfg_data(u_cfg_data),
        .in_valid(u_in_valid), .in_ready(u_in_ready), .in_data(u_in_data),
        .out_valid(u_out_valid), .out_ready(u_out_ready), .out_data(u_out_data),
        .out_last(u_out_last), .idle(u_idle));

    always @(posedge clock) begin
        if (!resetn) begin
            state <= ST_JOB;
            beat <= 0;
            ctx_loaded <= 1'b0;
            result_valid <= 1'b0;
            obeat <= 0;
        end else begin
            case (state)
                ST_JOB:
                    if (u_in_valid && u_in_ready) begin
                        if (beat == job_beats - 1) begin
                            beat <= 0;
                            state <= ST_ACK;
                        end else begin
                            beat <= beat + 1'b1;
                        end
                    end else if (beat == 0 && ivalid && !same_ctx) begin
                        state <= ST_CFG;
                    end
                ST_CFG:
                    if (u_cfg_valid && u_cfg_ready) begin
                        ctx_loaded <= 1'b0;
                        if (beat == 4 * D) begin
                            beat <= 0;
                            ctx_loaded <= 1'b1;
                            lm <= m;  lr <= r_mod;  ln0 <= n0;
                            state <= ST_JOB;
                        end else begin
                            beat <= beat + 1'b1;
                        end
                    end
                default:
                    state <= ST_JOB;
            endcase

            if (u_out_valid && u_out_ready) begin
                if (last_word) begin
                    result_r <= {u_out_data, partial};
                    result_valid <= 1'b1;
                    obeat <= 0;
                end else begin
                    partial[obeat[3:0]*W +: W] <= u_out_data;
                    obeat <= obeat + 1'b1;
                    if (taken) result_valid <= 1'b0;
                end
            end else if (taken) begin
                result_valid <= 1'b0;
            end
        end
    end
endmodule
