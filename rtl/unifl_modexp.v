`timescale 1ns/1ps
`default_nettype none
// UniFL exponentiation unit: NE MontMult engines (rtl/unifl_mm_engine.v), each running S
// independent exponentiations interleaved, with the window tables and running values in block RAM
// and the exponents streamed in.
//
// A job is one exponentiation, x^e mod M, with Montgomery entry and exit on the unit:
//     entry   X1 = MM(x, E)          E = R^2 mod M (x plain) or R mod M (x already in Montgomery
//                                    form: the product only reduces it below M)
//     table   X_d = MM(X_(d-1), X1)  d = 2 .. 2^K - 1;  X_0 = R mod M (a constant of the key)
//     ladder  fixed K-bit windows, most significant first: A = X_(top digit), then for every
//             further window K squarings A = MM(A, A) and one product A = MM(A, X_digit) --
//             a product at every window, X_0 included: the schedule does not depend on e
//     exit    Z = MM(A, F)           F = 1 (plain result), R mod M (Montgomery form), or G below
// with MM(a, b) = a b 2^(-W D) mod M.  The number of MontMults of a job depends only on its window
// count and kind, never on the values (a secret exponent is safe).
//
// Paillier encryption (job kind ENC, the key context holding n^2 and n R mod n^2):
//     c = (1 + m n) r^n mod n^2:  X1 = MM(r, R^2); G = MM(m, n R) + 1 = 1 + m n (the +1 is added
//     word-serially as the product is written back, FLASH's "lightweight dedicated module");
//     Montgomery result: G = MM(G, R^2) as well; then the ladder over e = n and Z = MM(A, G).
// Paillier CRT decryption: its two half-size ladders c^(p-1) mod p^2 and c^(q-1) mod q^2 are two
// MODEXP jobs on two key contexts held at once (NM = 2: the engines keep both moduli), so a
// stream of decryptions interleaves them with no reload; the host reduces c mod p^2 and mod q^2
// and finishes L, h_p, h_q and the CRT.
//
// Every MontMult has one operand below M (results, constants) and the other below 2^(W D), so the
// engine's single final subtraction is exact: the unit accepts any x, m, r below 2^(W D).
//
// Streams (AXI-stream rules: a beat moves on a rising edge where valid and ready are both high):
//  * cfg: for each key context c = 0 .. NM-1: D words of M, one word n0' = -M^-1 mod 2^W, then D
//    words each of R mod M, R^2 mod M and n R mod M (words least significant first; the last only
//    matters to ENC jobs, send zeros otherwise).  Taken only while no job is in the unit; jobs
//    wait until all NM contexts are loaded;
//  * in: one job = a header word, D words of x (r for ENC), for ENC D words of m, then the
//    ceil(nwin K / W) words of the exponent, least significant first.  Header:
//      [1:0] kind (0 MODEXP, 1 ENC), [2] x plain (entry with R^2), [3] result plain,
//      [8 +: 8] key context, [16 +: 16] nwin >= 1 (windows: the exponent has at most nwin K bits,
//      nwin K <= W 2^ceil(log2 D));
//  * out: D words per job, in job order, out_last on the last.
// Jobs go to the engines in turn and, within an engine, to its slots in turn; results leave in
// the same turn, so they come out in job order (jobs of one stream have equal length).
//
// Throughput: each engine starts a MontMult every interval (rtl/unifl_mm_engine.v) as long as
// one of its slots has its next MontMult ready; with S = 2 a slot's result is written back and
// its next operands streamed in well within the other slot's MontMult.
module unifl_modexp #(
    parameter integer W  = 64,   // word width (the engine's)
    parameter integer D  = 16,   // words per operand: 16 for a 1024-bit modulus, 32 for 2048
    parameter integer NE = 1,    // engines
    parameter integer S  = 2,    // exponentiations interleaved per engine (>= 2 keeps it busy)
    parameter integer K  = 4,    // window bits (divides W)
    parameter integer NM = 1,    // key contexts held at once (2 for CRT decryption)
    parameter integer TA = 26,
    parameter integer TB = 17
) (
    input  wire         clk,
    input  wire         rst_n,
    input  wire         cfg_valid,
    output wire         cfg_ready,
    input  wire [W-1:0] cfg_data,
    input  wire         in_valid,
    output wire         in_ready,
    input  wire [W-1:0] in_data,
    output wire         out_valid,
    input  wire         out_ready,
    output wire [W-1:0] out_data,
    output wire         out_last,
    output wire         idle
);
    localparam integer JW  = (D < 2) ? 1 : $clog2(D);
    localparam integer NEW = (NE < 2) ? 1 : $clog2(NE);
    localparam integer MBW = (NM < 2) ? 1 : $clog2(NM);
    localparam integer NLOC = (1 << K) + 1;           // locations per slot
    localparam integer NLT  = S * NLOC + 4 * NM;      // locations per lane
    localparam integer LAW  = $clog2(NLT);
    localparam integer AW   = LAW + JW;

`ifndef SYNTHESIS
    initial begin
        if (W % K != 0 || K < 1 || K > 8 || S < 1 || NE < 1 || NM < 1 || NM > 256 || D < 2) begin
            $display("unifl_modexp: unsupported parameters W=%0d D=%0d NE=%0d S=%0d K=%0d NM=%0d",
                     W, D, NE, S, K, NM);
            $finish;
        end
    end
`endif

    // ---------------------------------------------------------------- key contexts (cfg)
    // beat order per context: M (D), n0' (1), R mod M (D), R^2 mod M (D), n R mod M (D)
    reg  [MBW-1:0] cc;          // context being loaded
    reg  [2:0]     cp;          // part: 0 M, 1 n0', 2 R mod M, 3 R^2, 4 n R
    reg  [JW:0]    cj;          // word within the part
    reg            cfg_done, cfg_busy;
    wire [NE-1:0]  l_cfg_rdy, l_idle;
    wire           any_job;
    wire           cfg_eng = (cp <= 3'd1);
    // RAM location of a constant: after the slots' areas, 4 per context (0 R, 1 R^2, 2 n R)
    wire [LAW-1:0] cfg_loc = S * NLOC + cc * 4 + (cp - 3'd2);
    wire [AW-1:0]  cfg_addr = {cfg_loc, cj[JW-1:0]};
    assign cfg_ready = rst_n && (&l_cfg_rdy) && !any_job;
    wire cf = cfg_valid && cfg_ready;
    wire part_end = (cp == 3'd1) || (cj == D - 1);

    always @(posedge clk) begin
        if (!rst_n) begin
            cc <= 0;  cp <= 0;  cj <= 0;  cfg_done <= 1'b0;  cfg_busy <= 1'b0;
        end else if (cf) begin
            cfg_done <= 1'b0;
            cfg_busy <= 1'b1;
            if (part_end) begin
                cj <= 0;
                if (cp == 3'd4) begin
                    cp <= 0;
                    if (cc == NM - 1) begin
                        cc <= 0;  cfg_done <= 1'b1;  cfg_busy <= 1'b0;
                    end else begin
                        cc <= cc + 1'b1;
                    end
                end else begin
                    cp <= cp + 1'b1;
                end
            end else begin
                cj <= cj + 1'b1;
            end
        end
    end

    // ---------------------------------------------------------------- lanes (one per engine)
    reg  [NEW-1:0] li, lo;       // lane taking the next job / giving the next result
    wire [NE-1:0]  l_in_ready, l_job_end, l_out_valid, l_out_last;
    wire [NE*W-1:0] l_out_data;
    wire [NE-1:0]  l_busy;
    assign any_job  = |l_busy;
    assign in_ready = rst_n && cfg_done && l_in_ready[li];
    assign out_valid = l_out_valid[lo];
    assign out_last  = l_out_last[lo];
    assign out_data  = l_out_data[lo*W +: W];
    assign idle      = &l_idle && !cfg_busy;

    genvar e;
    generate
        for (e = 0; e < NE; e = e + 1) begin : lane
            unifl_modexp_lane #(.W(W), .D(D), .S(S), .K(K), .NM(NM), .TA(TA), .TB(TB),
                                .AW(AW), .LAW(LAW)) u (
                .clk(clk), .rst_n(rst_n),
                .cfg_v(cf), .cfg_eng(cfg_eng), .cfg_addr(cfg_addr), .cfg_data(cfg_data),
                .cfg_rdy(l_cfg_rdy[e]),
                .in_valid(in_valid && cfg_done && li == e), .in_ready(l_in_ready[e]),
                .in_data(in_data), .job_end(l_job_end[e]),
                .out_valid(l_out_valid[e]), .out_ready(out_ready && lo == e),
                .out_data(l_out_data[e*W +: W]), .out_last(l_out_last[e]),
                .busy(l_busy[e]), .idle(l_idle[e]));
        end
    endgenerate

    always @(posedge clk) begin
        if (!rst_n) begin
            li <= 0;  lo <= 0;
        end else begin
            if (in_valid && in_ready && l_job_end[li])
                li <= (li == NE - 1) ? {NEW{1'b0}} : li + 1'b1;
            if (out_valid && out_ready && out_last)
                lo <= (lo == NE - 1) ? {NEW{1'b0}} : lo + 1'b1;
        end
    end
endmodule


// One engine with S exponentiation slots: loads jobs into its slots, issues each slot's next
// MontMult to the engine, writes results back, and unloads finished jobs in slot order.
// Storage (block RAM, port A: write or read of operand a; port B: read of operand b or of a result
// being unloaded): per slot X_1 .. X_(2^K-1), A and G (D words each, at D-word strides), then the
// constants of the NM key contexts; the exponents sit in a LUT RAM beside it.
module unifl_modexp_lane #(
    parameter integer W = 64,
    parameter integer D = 16,
    parameter integer S = 2,
    parameter integer K = 4,
    parameter integer NM = 1,
    parameter integer TA = 26,
    parameter integer TB = 17,
    parameter integer AW = 10,
    parameter integer LAW = 6
) (
    input  wire          clk,
    input  wire          rst_n,
    input  wire          cfg_v,
    input  wire          cfg_eng,
    input  wire [AW-1:0] cfg_addr,
    input  wire [W-1:0]  cfg_data,
    output wire          cfg_rdy,
    input  wire          in_valid,
    output wire          in_ready,
    input  wire [W-1:0]  in_data,
    output wire          job_end,       // the beat offered now is a job's last
    output wire          out_valid,
    input  wire          out_ready,
    output wire [W-1:0]  out_data,
    output wire          out_last,
    output wire          busy,          // a job is loaded, loading or not yet unloaded
    output wire          idle
);
    localparam integer JW  = (D < 2) ? 1 : $clog2(D);
    localparam integer SW  = (S < 2) ? 1 : $clog2(S);
    localparam integer MBW = (NM < 2) ? 1 : $clog2(NM);
    localparam integer NLOC = (1 << K) + 1;
    localparam integer CB   = S * NLOC;           // first constant location
    localparam integer KW   = (K < 2) ? 1 : $clog2(K);
    localparam integer DPW  = W / K;              // digits per exponent word
    localparam integer DSH  = $clog2(DPW);
    localparam integer EAW  = SW + JW;            // exponent RAM address: {slot, word}
    localparam integer LOCW = K + 1;              // a location within a slot (0 .. 2^K)
    localparam integer FD   = 4;                  // output FIFO depth
    // phases of a slot: the MontMult it issues next (or has in flight)
    localparam [2:0] P_ENTRY = 3'd0, P_G1 = 3'd1, P_G2 = 3'd2, P_TAB = 3'd3, P_SQ = 3'd4,
                     P_MUL = 3'd5, P_EXIT = 3'd6;
    localparam [LOCW-1:0] L_ACC = 0, L_X1 = 1, L_G = 1 << K;
    localparam [1:0] C_RM = 2'd0, C_R2 = 2'd1, C_NR = 2'd2;

    // ---------------------------------------------------------------- slot state
    reg           act  [0:S-1];   // a job is loaded (its MontMults run)
    reg           pend [0:S-1];   // its current MontMult is in the engine
    reg           dn   [0:S-1];   // finished: the result is in A, waiting to be unloaded
    reg           s_enc[0:S-1], s_inp[0:S-1], s_outp[0:S-1];
    reg [MBW-1:0] s_ctx[0:S-1];
    reg [15:0]    s_nw [0:S-1];   // windows
    reg [2:0]     ph   [0:S-1];
    reg [K:0]     s_d  [0:S-1];   // table entry being computed
    reg [15:0]    s_win[0:S-1];   // window of the ladder
    reg [KW:0]    s_k  [0:S-1];   // squarings done in this window
    reg           s_first[0:S-1]; // the ladder's value is still X_(top digit), not A
    reg [K-1:0]   s_dig[0:S-1];   // digit the current MontMult multiplies by

    // ---------------------------------------------------------------- memories
    reg           we_a;
    reg  [AW-1:0] addr_a, addr_b;
    reg  [W-1:0]  wd_a;
    wire [W-1:0]  rd_a, rd_b;
    unifl_mm_bram #(.DW(W), .AW(AW)) ram (.clk(clk), .we_a(we_a), .addr_a(addr_a), .wd_a(wd_a),
        .rd_a(rd_a), .addr_b(addr_b), .rd_b(rd_b));
    reg            e_we;
    reg  [EAW-1:0] e_wa, e_ra;
    wire [W-1:0]   e_rd;
    unifl_mm_ram #(.DW(W), .AW(EAW)) eram (.clk(clk), .we(e_we), .wa(e_wa), .wd(in_data),
        .ra(e_ra), .rd(e_rd));

    function [LAW-1:0] sloc(input [SW-1:0] s, input [LOCW-1:0] l);
        sloc = s * NLOC + l;
    endfunction
    function [LAW-1:0] cloc(input [MBW-1:0] c, input [1:0] k);
        cloc = CB + c * 4 + k;
    endfunction
    // X_d of slot s, with X_0 = R mod M of its context
    function [LAW-1:0] tsel(input [SW-1:0] s, input [MBW-1:0] c, input [K-1:0] d);
        tsel = (d == 0) ? cloc(c, C_RM) : sloc(s, {1'b0, d});
    endfunction

    // ---------------------------------------------------------------- engine
    wire         e_in_ready, e_out_valid, e_out_last, e_idle, e_cfg_ready;
    wire [W-1:0] e_out_z;
    reg          iss_v, iss_one, iss_j0;
    reg  [MBW-1:0] iss_mb;
    wire [W-1:0] e_in_b = iss_one ? {{(W-1){1'b0}}, iss_j0} : rd_b;
    localparam [1:0] M_IDLE = 2'd0, M_ISS = 2'd1, M_COL = 2'd2;
    reg  [1:0]   mst;
    reg  [JW-1:0] mj;
    reg  [SW-1:0] ms;            // slot issuing / collecting
    wire         col = (mst == M_COL);
    unifl_mm_engine #(.W(W), .D(D), .TA(TA), .TB(TB), .NM(NM)) engine (
        .clk(clk), .rst_n(rst_n),
        .cfg_valid(cfg_v && cfg_eng), .cfg_ready(e_cfg_ready), .cfg_data(cfg_data),
        .in_valid(iss_v), .in_ready(e_in_ready), .in_a(rd_a), .in_b(e_in_b), .in_mb(iss_mb),
        .out_valid(e_out_valid), .out_ready(col), .out_z(e_out_z), .out_last(e_out_last),
        .idle(e_idle));
    assign cfg_rdy = cfg_eng ? e_cfg_ready : (mst == M_IDLE) && !col_w;

    // slots with a MontMult in the engine, in issue order (results return in that order)
    reg  [SW-1:0] fq [0:S-1];
    reg  [SW:0]   fq_n;
    // next slot to try for issue (round robin)
    reg  [SW-1:0] rr;

    // ---------------------------------------------------------------- loader
    localparam [1:0] L_HDR = 2'd0, L_XW = 2'd1, L_MW = 2'd2, L_EW = 2'd3;
    reg  [1:0]    lst;
    reg  [SW-1:0] ls;            // slot being loaded (slots taken in turn)
    reg  [JW:0]   lj;
    reg  [JW:0]   l_ew;          // exponent words of the job being loaded
    reg           col_w;         // a collected result word waits one cycle to be written
    wire          port_a_free = (mst == M_IDLE) && !col_w;
    wire [JW:0]   hdr_ew = ((in_data[31:16] * K) + W - 1) / W;
    assign in_ready = rst_n && ((lst == L_HDR) ? !act[ls] && !dn[ls]
                              : (lst == L_EW) ? 1'b1 : port_a_free);
    wire ld = in_valid && in_ready;
    assign job_end = (lst == L_EW) && (lj == l_ew - 1'b1);

    // ---------------------------------------------------------------- unloader
    reg  [SW-1:0] us;            // slot whose result leaves next
    reg  [JW-1:0] uj;
    reg           u_rv, u_rl;    // a word was read last cycle (and it is the last)
    reg  [W-1:0]  of_d [0:FD-1];
    reg           of_l [0:FD-1];
    reg  [2:0]    of_n;
    reg  [1:0]    of_r, of_w;
    wire          u_rd = dn[us] && (mst != M_ISS) && ({1'b0, of_n} + u_rv < FD);
    assign out_valid = (of_n != 0);
    assign out_data  = of_d[of_r];
    assign out_last  = of_l[of_r];
    wire          u_pop = out_valid && out_ready;

    // ---------------------------------------------------------------- issue choice
    reg          i_ok;
    reg [SW-1:0] i_s;
    integer q;
    always @(*) begin
        i_ok = 1'b0;
        i_s  = rr;
        for (q = S - 1; q >= 0; q = q - 1) begin
            if (act[(rr + q) % S] && !pend[(rr + q) % S] && !dn[(rr + q) % S]) begin
                i_ok = 1'b1;
                i_s  = (rr + q) % S;
            end
        end
    end
    wire start_col = (mst == M_IDLE) && e_out_valid && (fq_n != 0);
    wire start_iss = (mst == M_IDLE) && !e_out_valid && i_ok && e_in_ready;

    // operands of slot ms's current MontMult (locations) and its destination
    reg [LAW-1:0] oa, ob, od;
    reg           o_one, o_inc;
    always @(*) begin
        o_one = 1'b0;
        o_inc = 1'b0;
        od = sloc(ms, L_ACC);
        oa = sloc(ms, L_ACC);
        ob = sloc(ms, L_ACC);
        case (ph[ms])
            P_ENTRY: begin
                oa = sloc(ms, L_X1);
                ob = cloc(s_ctx[ms], s_inp[ms] ? C_R2 : C_RM);
                od = sloc(ms, L_X1);
            end
            P_G1: begin
                oa = sloc(ms, L_G);  ob = cloc(s_ctx[ms], C_NR);  od = sloc(ms, L_G);
                o_inc = 1'b1;
            end
            P_G2: begin
                oa = sloc(ms, L_G);  ob = cloc(s_ctx[ms], C_R2);  od = sloc(ms, L_G);
            end
            P_TAB: begin
                oa = sloc(ms, s_d[ms] - 1'b1);  ob = sloc(ms, L_X1);  od = sloc(ms, s_d[ms]);
            end
            P_SQ: begin
                oa = s_first[ms] ? tsel(ms, s_ctx[ms], s_dig[ms]) : sloc(ms, L_ACC);
                ob = oa;
            end
            P_MUL: begin
                ob = tsel(ms, s_ctx[ms], s_dig[ms]);
            end
            default: begin   // P_EXIT
                oa = s_first[ms] ? tsel(ms, s_ctx[ms], s_dig[ms]) : sloc(ms, L_ACC);
                ob = s_enc[ms] ? sloc(ms, L_G) : cloc(s_ctx[ms], C_RM);
                o_one = !s_enc[ms] && s_outp[ms];
            end
        endcase
    end

    // ---------------------------------------------------------------- port multiplexing
    // a collected word is registered, then written with the +1 of G carried across the words
    // (the adder's carry chain has a cycle of its own)
    reg [W-1:0]  col_z;
    reg [AW-1:0] col_a;
    reg          col_inc, col_first;
    reg          inc_c;
    wire [W:0]   inc_sum = {1'b0, col_z} + {{W{1'b0}}, col_inc & (col_first | inc_c)};
    always @(*) begin
        we_a = 1'b0;
        addr_a = {oa, mj};
        addr_b = {ob, mj};
        wd_a = in_data;
        if (col_w) begin
            we_a = 1'b1;
            addr_a = col_a;
            wd_a = inc_sum[W-1:0];
        end else if (mst == M_IDLE) begin
            if (cfg_v && !cfg_eng) begin
                we_a = 1'b1;  addr_a = cfg_addr;  wd_a = cfg_data;
            end else if (ld && (lst == L_XW || lst == L_MW)) begin
                we_a = 1'b1;
                addr_a = {sloc(ls, (lst == L_XW) ? L_X1 : L_G), lj[JW-1:0]};
            end
        end
        if (mst != M_ISS) addr_b = {sloc(us, L_ACC), uj};
    end

    // ---------------------------------------------------------------- next step of a slot
    // computed for slot ms when its MontMult's result has been written (last collect beat)
    wire [15:0] nwin = s_nw[ms];
    // digit needed next: of window s_win (entering P_MUL) or of the top window (entering the ladder)
    wire [15:0] dwin = (ph[ms] == P_SQ) ? s_win[ms] : nwin - 1'b1;
    always @(*) e_ra = {ms, dwin[DSH +: JW]};
    wire [K-1:0] dnext = e_rd[dwin[DSH-1:0] * K +: K];

    integer z;
    always @(posedge clk) begin
        if (!rst_n) begin
            mst <= M_IDLE;  mj <= 0;  ms <= 0;  rr <= 0;  fq_n <= 0;
            iss_v <= 1'b0;  col_w <= 1'b0;
            lst <= L_HDR;  ls <= 0;  lj <= 0;
            us <= 0;  uj <= 0;  u_rv <= 1'b0;  of_n <= 0;  of_r <= 0;  of_w <= 0;
            for (z = 0; z < S; z = z + 1) begin
                act[z] <= 1'b0;  pend[z] <= 1'b0;  dn[z] <= 1'b0;
            end
        end else begin
            // ---- issue and collect
            iss_v <= (mst == M_ISS);
            col_w <= col;
            col_z <= e_out_z;
            col_a <= {od, mj};
            col_inc <= o_inc;
            col_first <= (mj == 0);
            if (col_w) inc_c <= inc_sum[W];
            iss_one <= o_one;
            iss_j0 <= (mj == 0);
            iss_mb <= s_ctx[ms];
            case (mst)
                M_IDLE:
                    if (start_col) begin
                        mst <= M_COL;  mj <= 0;  ms <= fq[0];
                    end else if (start_iss) begin
                        mst <= M_ISS;  mj <= 0;  ms <= i_s;
                    end
                M_ISS: begin
                    mj <= mj + 1'b1;
                    if (mj == D - 1) begin
                        mst <= M_IDLE;
                        pend[ms] <= 1'b1;
                        fq[fq_n[SW-1:0]] <= ms;
                        fq_n <= fq_n + 1'b1;
                        rr <= (ms == S - 1) ? {SW{1'b0}} : ms + 1'b1;
                    end
                end
                default: begin   // M_COL
                    mj <= mj + 1'b1;
                    if (mj == D - 1) begin
                        mst <= M_IDLE;
                        pend[ms] <= 1'b0;
                        for (z = 0; z < S - 1; z = z + 1) fq[z] <= fq[z+1];
                        fq_n <= fq_n - 1'b1;
                        // advance the slot to its next MontMult
                        case (ph[ms])
                            P_ENTRY, P_G1, P_G2: begin
                                if (ph[ms] == P_ENTRY && s_enc[ms]) ph[ms] <= P_G1;
                                else if (ph[ms] == P_G1 && !s_outp[ms]) ph[ms] <= P_G2;
                                else if (K > 1) begin
                                    ph[ms] <= P_TAB;  s_d[ms] <= 2;
                                end else begin
                                    s_first[ms] <= 1'b1;  s_dig[ms] <= dnext;
                                    ph[ms] <= (nwin == 1) ? P_EXIT : P_SQ;
                                    s_win[ms] <= nwin - 2'd2;  s_k[ms] <= 0;
                                end
                            end
                            P_TAB:
                                if (s_d[ms] == (1 << K) - 1) begin
                                    s_first[ms] <= 1'b1;  s_dig[ms] <= dnext;
                                    ph[ms] <= (nwin == 1) ? P_EXIT : P_SQ;
                                    s_win[ms] <= nwin - 2'd2;  s_k[ms] <= 0;
                                end else begin
                                    s_d[ms] <= s_d[ms] + 1'b1;
                                end
                            P_SQ: begin
                                s_first[ms] <= 1'b0;
                                if (s_k[ms] == K - 1) begin
                                    ph[ms] <= P_MUL;  s_dig[ms] <= dnext;
                                end else begin
                                    s_k[ms] <= s_k[ms] + 1'b1;
                                end
                            end
                            P_MUL:
                                if (s_win[ms] == 0) begin
                                    ph[ms] <= P_EXIT;
                                end else begin
                                    s_win[ms] <= s_win[ms] - 1'b1;  s_k[ms] <= 0;  ph[ms] <= P_SQ;
                                end
                            default:         // P_EXIT: the result is in A
                                dn[ms] <= 1'b1;
                        endcase
                    end
                end
            endcase

            // ---- loader
            if (ld) begin
                case (lst)
                    L_HDR: begin
                        s_enc[ls]  <= (in_data[1:0] == 2'd1);
                        s_inp[ls]  <= in_data[2];
                        s_outp[ls] <= in_data[3];
                        s_ctx[ls]  <= in_data[8 +: MBW];
                        s_nw[ls]   <= in_data[31:16];
                        l_ew       <= hdr_ew;
                        ph[ls]     <= P_ENTRY;
                        lst <= L_XW;  lj <= 0;
                    end
                    L_XW, L_MW:
                        if (lj == D - 1) begin
                            lj <= 0;
                            lst <= (lst == L_XW && s_enc[ls]) ? L_MW : L_EW;
                        end else begin
                            lj <= lj + 1'b1;
                        end
                    default:         // L_EW
                        if (lj == l_ew - 1'b1) begin
                            act[ls] <= 1'b1;
                            lst <= L_HDR;  lj <= 0;
                            ls <= (ls == S - 1) ? {SW{1'b0}} : ls + 1'b1;
                        end else begin
                            lj <= lj + 1'b1;
                        end
                endcase
            end

            // ---- unloader: slot us's A, word by word, into the output FIFO
            u_rv <= u_rd;
            u_rl <= (uj == D - 1);
            if (u_rd) begin
                if (uj == D - 1) begin
                    uj <= 0;
                    dn[us] <= 1'b0;  act[us] <= 1'b0;
                    us <= (us == S - 1) ? {SW{1'b0}} : us + 1'b1;
                end else begin
                    uj <= uj + 1'b1;
                end
            end
            if (u_rv) begin
                of_d[of_w] <= rd_b;
                of_l[of_w] <= u_rl;
                of_w <= of_w + 1'b1;
            end
            if (u_pop) of_r <= of_r + 1'b1;
            of_n <= of_n + u_rv - u_pop;
        end
    end

    // exponent words go to the LUT RAM as they arrive
    always @(*) begin
        e_we = ld && (lst == L_EW);
        e_wa = {ls, lj[JW-1:0]};
    end

    reg b;
    integer v;
    always @(*) begin
        b = (lst != L_HDR) || (of_n != 0) || u_rv;
        for (v = 0; v < S; v = v + 1) b = b || act[v];
    end
    assign busy = b;
    assign idle = !b && (mst == M_IDLE) && !col_w && e_idle;

`ifndef SYNTHESIS
    // MontMults issued to the engine, for the testbench's rate measurement
    integer sim_mm = 0;
    always @(posedge clk) if (rst_n && start_iss) sim_mm <= sim_mm + 1;
    always @(posedge clk) begin
        if (rst_n && iss_v && !e_in_ready)
            $display("unifl_modexp: ERROR operand beat offered while the engine is not ready at %0t",
                     $time);
        if (rst_n && mst == M_COL && !e_out_valid)
            $display("unifl_modexp: ERROR result word missing while collecting at %0t", $time);
        if (rst_n && ld && lst == L_HDR && (in_data[31:16] == 0 || hdr_ew > (1 << JW)))
            $display("unifl_modexp: ERROR job header with nwin=%0d (1 .. %0d) at %0t",
                     in_data[31:16], (1 << JW) * W / K, $time);
    end
`endif
endmodule
`default_nettype wire
