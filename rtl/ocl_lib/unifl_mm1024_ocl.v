`timescale 1ns/1ps
// Intel FPGA SDK for OpenCL RTL-library module behind the OpenCL function
//     ulong16 unifl_mm1024(ulong16 a, ulong16 b, ulong16 m, ulong n0);   // a*b*2^-1024 mod m
// built on the word-serial cluster rtl/unifl_mm_cluster.v (N engines rtl/unifl_mm_engine.v,
// W = 64, D = 16 words per 1024-bit operand).  Specs: unifl_mm1024.xml (this module, stallable)
// and unifl_mm1024_fixed.xml (unifl_mm1024_ocl_fixed: FIXED_LATENCY = 1).  docs/backends/fpga-intel.md.
//
// Port directions follow Intel's RTL-module interface, which is NOT the usual AXI naming:
//   ivalid (in)  upstream has a call on a, b, m, n0      oready (out) this module takes the call
//   ovalid (out) `result` holds a result                  iready (in)  downstream takes it
// A call transfers on a rising edge with ivalid && oready, a result on one with ovalid && iready.
// Intel: "When ivalid = 1 and oready = 0, the upstream module is expected to hold the values of
// ivalid, A, and B in the next clock cycle."  The wrapper relies on exactly that: it streams the
// call's words to the cluster straight from the held a/b/m/n0 ports (no 3 x 1024-bit copy) and
// raises oready only once every word has gone, so the handshake completes the call.
//
// Call timing (from the cycle ivalid rises, modulus already loaded, cluster not full):
//   D = 16 operand beats (word j of a and b on beat j) + 1 cycle with oready high = 17 cycles per
//   call at best.  A call whose (m, n0) differs from the loaded modulus first waits until no engine
//   holds an operand or computes (cluster cfg_ready), then sends D + 1 = 17 cfg beats (m words,
//   then n0), then its operand beats: results stay in call order because one cluster serves all.
// Throughput: one engine starts a MontMult every ~D*max(D,17) cycles (271 measured at D = 16), so
//   N engines give min(N / 271, 1 / (D+1)) calls per cycle with one modulus: 3.7 (N = 1),
//   14.8 (N = 4), 29.5 (N = 8) calls per 1000 cycles measured, at most 58.8 (the serializer).
// Latency: 312 cycles from the call handshake to ovalid on a free engine (Icarus simulation,
//   rtl/tb/test_ocl_mm1024.py); more in the stallable variant when calls queue behind each other.
//
// Reset (synchronous, active low, as the cluster): oready and ovalid are forced low while resetn
// is low (0 cycles after it falls; Intel's bound for stallable modules is 40) and come from
// registers cleared by reset, so they stay low after it until a call has been streamed / a result
// assembled.  The module takes its first call the cycle after resetn rises.
//
// FIXED_LATENCY = 1 (the closest legal form to "non-stallable", see docs/backends/fpga-intel.md): a call is
// admitted only while fewer than N calls are inside (accepted, result not yet taken).  Then call k's
// engine (k mod N, round robin) has delivered call k-N and is empty, so its MontMult starts at once
// and, as long as the downstream does not stall, ovalid rises a fixed number of cycles after the
// handshake (EXPECTED_LATENCY in unifl_mm1024_fixed.xml, checked exactly in simulation).
module unifl_mm1024_ocl #(
    parameter integer N = 4,              // engines in the cluster
    parameter integer FIXED_LATENCY = 0   // 1: at most N calls inside, latency independent of load
) (
    input  wire          clock,
    input  wire          resetn,
    input  wire          ivalid,
    output wire          oready,
    output wire          ovalid,
    input  wire          iready,
    input  wire [1023:0] a,
    input  wire [1023:0] b,
    input  wire [1023:0] m,
    input  wire [63:0]   n0,
    output wire [1023:0] result
);
    localparam integer W = 64;
    localparam integer D = 16;
    localparam [1:0] ST_OPER = 2'd0,    // streaming the call's operand words (or waiting for one)
                     ST_CFG  = 2'd1,    // loading the call's modulus into every engine
                     ST_ACK  = 2'd2;    // all words sent: oready high for one cycle

    reg  [1:0]    state;
    reg  [4:0]    beat;                 // word index within the operand (0..D-1) or cfg (0..D) beats
    reg           mod_loaded;
    reg  [1023:0] loaded_m;
    reg  [63:0]   loaded_n0;
    reg  [15:0]   calls_inside;         // calls accepted whose result has not been taken

    wire same_mod = mod_loaded && m == loaded_m && n0 == loaded_n0;
    wire admit    = FIXED_LATENCY == 0 || calls_inside < N;

    // cluster ports
    wire          c_cfg_ready, c_in_ready, c_out_valid, c_out_last, c_idle;
    wire [W-1:0]  c_out_z;
    wire          c_cfg_valid = state == ST_CFG && ivalid;
    wire [W-1:0]  c_cfg_data  = beat == D ? n0 : m[beat[3:0]*W +: W];
    // beat 0 decides whether the held call may start; later beats finish a call already started
    wire          c_in_valid  = state == ST_OPER && ivalid && (beat != 0 || (same_mod && admit));
    wire [W-1:0]  c_in_a      = a[beat[3:0]*W +: W];
    wire [W-1:0]  c_in_b      = b[beat[3:0]*W +: W];

    // result assembly: words 0..D-2 collect in `partial` while `result_r` may still be waiting for
    // the downstream; the last word moves the whole result over once `result_r` is free
    reg  [W*(D-1)-1:0] partial;
    reg  [1023:0] result_r;
    reg           result_valid;
    reg  [4:0]    obeat;
    wire          last_word   = obeat == D - 1;
    wire          c_out_ready = !last_word || !result_valid || iready;
    wire          taken       = result_valid && iready;
    wire          accepted    = state == ST_ACK && ivalid;

    assign oready = resetn && state == ST_ACK;
    assign ovalid = resetn && result_valid;
    assign result = result_r;

    unifl_mm_cluster #(.W(W), .D(D), .N(N)) cluster (
        .clk(clock), .rst_n(resetn),
        .cfg_valid(c_cfg_valid), .cfg_ready(c_cfg_ready), .cfg_data(c_cfg_data),
        .in_valid(c_in_valid), .in_ready(c_in_ready), .in_a(c_in_a), .in_b(c_in_b), .in_mb(1'b0),
        .out_valid(c_out_valid), .out_ready(c_out_ready), .out_z(c_out_z), .out_last(c_out_last),
        .idle(c_idle));

    always @(posedge clock) begin
        if (!resetn) begin
            state <= ST_OPER;
            beat <= 0;
            mod_loaded <= 1'b0;
            calls_inside <= 0;
            result_valid <= 1'b0;
            obeat <= 0;
        end else begin
            case (state)
                ST_OPER:
                    if (c_in_valid && c_in_ready) begin
                        if (beat == D - 1) begin
                            beat <= 0;
                            state <= ST_ACK;
                        end else begin
                            beat <= beat + 1'b1;
                        end
                    end else if (beat == 0 && ivalid && !same_mod) begin
                        state <= ST_CFG;                    // beat stays 0: first cfg beat
                    end
                ST_CFG:
                    if (c_cfg_valid && c_cfg_ready) begin
                        if (beat == D) begin
                            beat <= 0;
                            mod_loaded <= 1'b1;
                            loaded_m <= m;
                            loaded_n0 <= n0;
                            state <= ST_OPER;
                        end else begin
                            // a half-loaded modulus is never "loaded": a reset or a different
                            // modulus later starts the cfg sequence from word 0 again
                            mod_loaded <= 1'b0;
                            beat <= beat + 1'b1;
                        end
                    end
                default:                                    // ST_ACK: the handshake completes now
                    state <= ST_OPER;
            endcase

            calls_inside <= calls_inside + (accepted ? 16'd1 : 16'd0) - (taken ? 16'd1 : 16'd0);

            if (c_out_valid && c_out_ready) begin
                if (last_word) begin
                    result_r <= {c_out_z, partial};
                    result_valid <= 1'b1;
                    obeat <= 0;
                end else begin
                    partial[obeat[3:0]*W +: W] <= c_out_z;
                    obeat <= obeat + 1'b1;
                    if (taken) result_valid <= 1'b0;
                end
            end else if (taken) begin
                result_valid <= 1'b0;
            end
        end
    end

`ifdef UNIFL_OCL_CHECKS
    // simulation-only cross-check of the cluster's framing against the wrapper's word count
    always @(posedge clock)
        if (resetn && c_out_valid && c_out_ready && c_out_last != last_word)
            $display("UNIFL_OCL_ERROR out_last=%0d at word %0d", c_out_last, obeat);
`endif
endmodule

// The fixed-latency variant as its own top-level module, so unifl_mm1024_fixed.xml names a module
// whose defaults are the variant (no reliance on XML parameter overrides).
module unifl_mm1024_ocl_fixed #(
    parameter integer N = 4
) (
    input  wire          clock,
    input  wire          resetn,
    input  wire          ivalid,
    output wire          oready,
    output wire          ovalid,
    input  wire          iready,
    input  wire [1023:0] a,
    input  wire [1023:0] b,
    input  wire [1023:0] m,
    input  wire [63:0]   n0,
    output wire [1023:0] result
);
    unifl_mm1024_ocl #(.N(N), .FIXED_LATENCY(1)) core (
        .clock(clock), .resetn(resetn), .ivalid(ivalid), .oready(oready), .ovalid(ovalid),
        .iready(iready), .a(a), .b(b), .m(m), .n0(n0), .result(result));
endmodule
