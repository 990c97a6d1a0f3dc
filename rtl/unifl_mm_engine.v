`timescale 1ns/1ps
`default_nettype none
// UniFL MontMult engine, pipelined and double-buffered:
//     z = a * b * 2^(-W*D) mod M      (a, b < M, M odd, D words of W bits)
// bit-exact with unifl.core.montgomery.mont_mul_ref when W*D = 64*ceil(bits(M)/64).
//
// Algorithm: CIOS Montgomery multiplication in its one-pass form (one outer iteration per word b_i
// of b, FLASH's Algorithm 1):
//     q_i = (T_0 + a_0 b_i) n0' mod 2^W
//     T   = (T + a b_i + q_i M) / 2^W           word-serial: step j adds a_j b_i + q_i M_j + T_j
// with n0' = -M^-1 mod 2^W, T < 2M after every iteration, and one final conditional subtraction.
//
// Datapath (one word step issued per cycle, every stage registered):
//  * two W x W products per step, a_j b_i and q_i M_j, each cut into NA x NB tiles of TA x TB bits
//    (26 x 17: one DSP48E2 each; 3 x 4 = 12 per product at W = 64) with registered operands,
//    product and output (the DSP's A/B, M and P registers);
//  * the two products' tiles share offsets, so they are added tile by tile, and every tile sum is
//    cut at bit W into a low part and a high part.  Two registered adder trees give
//        S_lo(j) = sum of the low parts + T_j,   S_hi(j) = sum of the high parts
//    so that a_j b_i + q_i M_j + T_j = S_lo(j) + S_hi(j) 2^W, and no adder is wider than W + 8;
//  * the carry between word steps is kept in two pieces: S_hi(j-1) (known without waiting for
//    step j-1's carry) and e(j-1) < 2^8, the carry out of the low word.  The x stage adds
//    x_j = S_lo(j) + S_hi(j-1), the s stage s_j = x_j + e(j-1): T_{j-1} = s_j mod 2^W,
//    e(j) = s_j >> W.  The only loop-carried path is that one (W+8)-bit add with an 8-bit feedback;
//  * step 0's low word is 0 by the choice of q_i, so it only yields e(0) = S_lo(0) >> W; its slot in
//    the x/s adders computes the previous iteration's top: T_{D-1..D} = T_D + S_hi(D-1) + e(D-1);
//  * the q unit (one W x W -> W low-half multiplier, 8 DSPs at W = 64, used twice per iteration):
//    qa = a_0 b_{i+1} as the iteration starts, then q_{i+1} = (T_0' + qa) n0' as soon as the new T_0
//    leaves the s stage.  The next iteration starts when q_{i+1} is ready and the last word step of
//    this one has issued: an iteration takes P = max(D, PQ) cycles where PQ follows from the
//    pipeline depths (17 with the stage counts below);
//  * during the last iteration the q unit already computes q_0 of the next MontMult (T = 0), and
//    the final T words stream through a word-serial subtraction T - M into the result bank as they
//    leave the s stage; the next MontMult's first iteration reads T as 0 instead of clearing it.
//    So back-to-back MontMults start every D*P - (P - max(D, PQ0)) cycles: no load, drain or
//    subtraction phase between them.
//
// Storage: operands in two banks of LUT RAM (loaded word by word while the other bank computes),
// T in LUT RAM, M in LUT RAM (two read ports: issue and subtraction), results in two banks of LUT
// RAM holding both T and T - M and a select bit, unloaded word by word.  No operand or result is
// ever held as a D*W-bit register, and no port is wider than W bits.
//
// Streams (AXI-stream rules: a beat moves on a rising edge where valid and ready are both high;
// data are held while valid && !ready):
//  * cfg: for each of the NM modulus banks in turn, D beats of M (least significant word first),
//    then one beat of its n0'.  Accepted only while no operand is buffered or computing (results
//    may still be unloading); in_ready stays low until every bank is loaded;
//  * in:  D beats per MontMult, beat j = (word j of a, word j of b); in_mb (with word 0) names the
//    modulus bank the MontMult uses (ignored when NM = 1).  The result is exact (< M) when a < M
//    or b < M and the other is below 2^(W*D): T stays below 2M;
//  * out: D beats per MontMult, in input order, out_last on word D-1.
module unifl_mm_engine #(
    parameter integer W  = 64,  // word (limb) width
    parameter integer D  = 16,  // words per operand: 16 for 1024-bit, 32 for 2048-bit moduli
    parameter integer TA = 26,  // tile width on the a / M side of a DSP (<= 26: 27-bit signed port)
    parameter integer TB = 17,  // tile width on the b / q side (<= 17: 18-bit signed port)
    parameter integer NM = 1,   // moduli held at once (banks); each MontMult names its bank
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
    input  wire [MBW-1:0] in_mb,  // modulus bank of this MontMult (sampled with word 0; NM > 1)
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

    localparam integer NA  = (W + TA - 1) / TA;   // tiles per product, a side
    localparam integer NB  = (W + TB - 1) / TB;   // tiles per product, b side
    localparam integer NT  = NA * NB;
    localparam integer PW  = TA + TB;             // tile product width
    localparam integer WS  = W + 8;               // width of the tree sums, x and s
    localparam integer EW  = WS - W;              // width of the low-word carry e
    localparam integer SHW = NA * TA + NB * TB + 2; // room for a shifted tile sum
    localparam integer JW  = (D < 2) ? 1 : clog2(D);  // word index width
    localparam integer CW  = 8;                   // counter width (D and P below 2^CW)
    localparam integer LT  = clog2(NT + 1);       // adder-tree levels (tiles + the T leaf)
    // stage of the tag pipeline whose data leave the trees (tag k: registered at the end of the
    // k-th cycle after issue): operands (0), M (1), P (2), tile sums + T (3), tree levels
    localparam integer ST  = 3 + LT;
    // the M RAMs: D words per bank, NM banks
    localparam integer MAW = (NM < 2) ? JW : JW + MBW;

`ifndef SYNTHESIS
    initial begin
        if (D < 2 || D >= (1 << (CW - 1)) || TA > 26 || TB > 17 || W < TB || NM < 1) begin
            $display("unifl_mm_engine: unsupported parameters W=%0d D=%0d TA=%0d TB=%0d",
                     W, D, TA, TB);
            $finish;
        end
    end
`endif

    // tag carried along the word-step pipeline: valid, first iteration, last iteration,
    // result bank, modulus bank, word index j
    localparam integer TGW = 4 + MBW + JW;
    localparam integer TV = TGW - 1, TF = TGW - 2, TL = TGW - 3, TO = TGW - 4;

    // ============================================================================ loader
    reg          full [0:1];       // operand bank holds a whole MontMult not yet done
    reg          wb;               // bank being loaded
    reg [JW-1:0] lj;               // next word to load
    reg [W-1:0]  a0 [0:1], b0 [0:1];   // word 0 of each bank's operands (for the q unit)
    reg          cfg_done;         // a whole modulus is loaded
    reg [JW:0]   ck;               // cfg beat counter (0..D)
    reg [MBW-1:0] kb;              // modulus bank being loaded
    // with one bank every bank index is the constant 0 (synthesis then sees no bank logic at all)
    wire [MBW-1:0] kbs = (NM > 1) ? kb : {MBW{1'b0}};
    reg [MBW-1:0] mbk [0:1];       // modulus bank of each operand bank's MontMult

    // ============================================================================ control
    reg          run, pre, chain;
    reg [CW-1:0] i, t;
    reg          cb, nbk, rb;      // computing bank, bank of the next MontMult, next to claim
    reg          ob, nob, ro;      // result bank of the running / next MontMult, next to claim
    reg          obusy [0:1];      // result bank claimed (computing into it or not yet unloaded)
    reg          ofull [0:1];      // result bank complete, being unloaded
    reg          osel  [0:1];      // 1: the result is T - M, 0: T
    reg [W-1:0]  b_cur, b_next, q_cur, q_next;
    reg          q_rdy, qa_rdy, t0_rdy, qz;
    reg [W-1:0]  qa_reg, t0_reg;

    // nets used before the stage that drives them
    wire          t_we;
    wire [JW-1:0] t_wa;
    wire [WS-1:0] s_sum;
    wire          pipe_busy;

    wire last_it   = (i == D - 1);
    wire issue     = run && !pre && (t < D);
    wire can_claim = full[rb] && !obusy[ro];

    // ============================================================================ memories
    wire [W-1:0] a_rd, b_rd, m1_rd, m2_rd, t_rd, ot_rd, od_rd;
    wire         ld = in_valid && in_ready;
    wire         cf = cfg_valid && cfg_ready;
    // n0' of each bank; the q unit reads the one of the MontMult it computes q for
    reg  [MBW-1:0] q_mb;
    wire [W-1:0]   n0_q;
    generate
        if (NM > 1) begin : banks
            reg [W-1:0] n0 [0:NM-1];
            always @(posedge clk) if (cf && ck == D) n0[kb] <= cfg_data;
            assign n0_q = n0[q_mb];
        end else begin : one
            reg [W-1:0] n0;
            always @(posedge clk) if (cf && ck == D) n0 <= cfg_data;
            assign n0_q = n0;
        end
    endgenerate
    unifl_mm_ram #(.DW(W), .AW(JW + 1)) ram_a (.clk(clk), .we(ld), .wa({wb, lj}), .wd(in_a),
        .ra({cb, t[JW-1:0]}), .rd(a_rd));
    // b is read once per iteration: b_{i+1} for the q unit and the next iteration
    wire [CW-1:0] i1 = i + 1'b1;
    unifl_mm_ram #(.DW(W), .AW(JW + 1)) ram_b (.clk(clk), .we(ld), .wa({wb, lj}), .wd(in_b),
        .ra({cb, i1[JW-1:0]}), .rd(b_rd));
    wire          m_we = cf && (ck < D);
    wire [MBW-1:0] mb_c = (NM > 1) ? mbk[cb] : {MBW{1'b0}};  // bank of the computing MontMult
    reg  [MBW-1:0] x_mb;                    // ... of the words in the x stage
    // {bank, word}; with one bank the address is the word alone (the bank bit is cut off)
    wire [MAW-1:0] m_wa  = {kbs, ck[JW-1:0]};
    wire [MAW-1:0] m1_ra = {mb_c, t[JW-1:0]};
    wire [MAW-1:0] m2_ra = {x_mb, t_wa};
    unifl_mm_ram #(.DW(W), .AW(MAW)) ram_m1 (.clk(clk), .we(m_we), .wa(m_wa), .wd(cfg_data),
        .ra(m1_ra), .rd(m1_rd));
    reg  [JW-1:0] sw_k;
    // M_k for the subtraction is read in the s stage, a cycle ahead, and registered with T_k
    unifl_mm_ram #(.DW(W), .AW(MAW)) ram_m2 (.clk(clk), .we(m_we), .wa(m_wa), .wd(cfg_data),
        .ra(m2_ra), .rd(m2_rd));

    // ============================================================================ word steps
    wire [W-1:0] b_in = (t == 0) ? b_next : b_cur;
    wire [W-1:0] q_in = (t != 0) ? q_cur : q_arrive ? q_r : q_next;
    wire [TGW-1:0] tag0 = {issue, i == 0, last_it, ob, mb_c, t[JW-1:0]};
    reg  [TGW-1:0] tg [0:ST];
    integer s;
    always @(posedge clk) begin
        tg[0] <= rst_n ? tag0 : {TGW{1'b0}};
        for (s = 1; s <= ST; s = s + 1)
            tg[s] <= rst_n ? tg[s-1] : {TGW{1'b0}};
    end

    wire [NA*TA-1:0] ap = {{(NA*TA-W){1'b0}}, a_rd};
    wire [NA*TA-1:0] mp = {{(NA*TA-W){1'b0}}, m1_rd};
    wire [NB*TB-1:0] bp = {{(NB*TB-W){1'b0}}, b_in};
    wire [NB*TB-1:0] qp = {{(NB*TB-W){1'b0}}, q_in};
    wire [(NT+1)*WS-1:0] lo_leaves, hi_leaves;
    genvar ga, gb;
    generate
        for (ga = 0; ga < NA; ga = ga + 1) begin : ta
            for (gb = 0; gb < NB; gb = gb + 1) begin : tb
                localparam integer O = ga * TA + gb * TB;
                reg [TA-1:0] x1, x2;
                reg [TB-1:0] y1, y2;
                reg [PW-1:0] m1, m2, p1, p2;
                reg [WS-1:0] lo, hi;
                always @(posedge clk) begin
                    x1 <= ap[ga*TA +: TA];  y1 <= bp[gb*TB +: TB];   // a_j x b_i
                    x2 <= mp[ga*TA +: TA];  y2 <= qp[gb*TB +: TB];   // M_j x q_i
                    m1 <= x1 * y1;          m2 <= x2 * y2;
                    p1 <= m1;               p2 <= m2;
                end
                wire [PW:0]    ps = {1'b0, p1} + {1'b0, p2};
                wire [SHW-1:0] sh = {{(SHW-PW-1){1'b0}}, ps} << O;
                always @(posedge clk) begin
                    lo <= {{(WS-W){1'b0}}, sh[W-1:0]};
                    hi <= sh[W +: WS];
                end
                assign lo_leaves[(ga*NB+gb)*WS +: WS] = lo;
                assign hi_leaves[(ga*NB+gb)*WS +: WS] = hi;
            end
        end
    endgenerate
    // T_j joins the low tree with the tile sums (0 in a MontMult's first iteration)
    unifl_mm_ram #(.DW(W), .AW(JW)) ram_t (.clk(clk), .we(t_we), .wa(t_wa), .wd(s_sum[W-1:0]),
        .ra(tg[2][JW-1:0]), .rd(t_rd));
    reg [WS-1:0] t_leaf;
    always @(posedge clk) t_leaf <= tg[2][TF] ? {WS{1'b0}} : {{(WS-W){1'b0}}, t_rd};
    assign lo_leaves[NT*WS +: WS] = t_leaf;
    assign hi_leaves[NT*WS +: WS] = {WS{1'b0}};
    wire [WS-1:0] lo_sum, hi_sum;
    unifl_mm_sum #(.N(NT + 1), .WS(WS)) tree_lo (.clk(clk), .leaves(lo_leaves), .sum(lo_sum));
    unifl_mm_sum #(.N(NT + 1), .WS(WS)) tree_hi (.clk(clk), .leaves(hi_leaves), .sum(hi_sum));

    // ---- x stage: x_j = S_lo(j) + S_hi(j-1), or the top of the previous iteration
    wire [TGW-1:0] tt = tg[ST];
    wire           tv = tt[TV];
    wire [JW-1:0]  tj = tt[JW-1:0];
    reg            top_pend, top_first, top_last, top_ob;
    reg  [MBW-1:0] top_mb;
    reg            t_d;                          // T_D, the top word of T (0 or 1)
    reg [WS-1:0]   hi_prev, x_reg;
    reg            xk_step, xk_top, x_last, x_ob, s0_v;
    reg [JW-1:0]   x_j;
    reg [EW-1:0]   e0, e_reg;
    wire [WS-1:0]  x_a   = top_pend ? {{(WS-1){1'b0}}, t_d & ~top_first} : lo_sum;
    wire [WS-1:0]  x_sum = x_a + hi_prev;
    always @(posedge clk) begin
        x_reg    <= x_sum;
        xk_step  <= rst_n && tv && (tj != 0);
        xk_top   <= rst_n && top_pend;
        x_j      <= tj;
        x_last   <= top_pend ? top_last : tt[TL];
        x_ob     <= top_pend ? top_ob : tt[TO];
        x_mb     <= top_pend ? top_mb : tt[JW +: MBW];
        s0_v     <= rst_n && tv && (tj == 0);
        e0       <= lo_sum[WS-1:W];
        if (tv) hi_prev <= hi_sum;
        top_pend  <= rst_n && tv && (tj == D - 1);
        top_first <= tt[TF];
        top_last  <= tt[TL];
        top_ob    <= tt[TO];
        top_mb    <= tt[JW +: MBW];
    end

    // ---- s stage: s_j = x_j + e(j-1); writes T_{j-1} (or T_{D-1} and T_D for the top)
    assign s_sum = x_reg + {{(WS-EW){1'b0}}, e_reg};
    assign t_we  = xk_step || xk_top;
    assign t_wa  = xk_top ? D - 1 : x_j - 1'b1;
    reg           sw_v, sw_top, sw_tbit, sw_ob, sw_k0;
    reg [W-1:0]   sw_reg, sw_m;
    always @(posedge clk) begin
        sw_m    <= m2_rd;
        if (xk_top) t_d <= s_sum[W];
        if (s0_v) e_reg <= e0;
        else if (xk_step) e_reg <= s_sum[WS-1:W];
        sw_v    <= rst_n && (xk_step || xk_top) && x_last;
        sw_reg  <= s_sum[W-1:0];
        sw_k    <= t_wa;
        sw_k0   <= (t_wa == 0);             // word 0: no borrow in (decided a stage early)
        sw_top  <= xk_top;
        sw_tbit <= s_sum[W];
        sw_ob   <= x_ob;
    end

    // ---- subtraction stage (last iteration only): d_k = T_k - M_k - borrow, both kept
    reg           borrow;
    wire          b_in0 = borrow & ~sw_k0;
    wire [W:0]    d_sub = {1'b0, sw_reg} - {1'b0, sw_m} - {{W{1'b0}}, b_in0};
    always @(posedge clk)
        if (sw_v) borrow <= d_sub[W];
    reg           ub;              // result bank being unloaded
    reg [JW-1:0]  uk;              // next word to unload
    unifl_mm_ram #(.DW(W), .AW(JW + 1)) ram_ot (.clk(clk), .we(sw_v), .wa({sw_ob, sw_k}),
        .wd(sw_reg), .ra({ub, uk}), .rd(ot_rd));
    unifl_mm_ram #(.DW(W), .AW(JW + 1)) ram_od (.clk(clk), .we(sw_v), .wa({sw_ob, sw_k}),
        .wd(d_sub[W-1:0]), .ra({ub, uk}), .rd(od_rd));

    // ============================================================================ q unit
    reg          qi_v, qi_s;       // issue this cycle: valid, 1 = q (0 = qa)
    reg [W-1:0]  qi_x, qi_y;
    wire [W-1:0] q_r;
    wire         qo_v, qo_s, qn_v, qn_s, q_busy;
    unifl_mm_lowmul #(.W(W), .TA(TA), .TB(TB), .TG(1)) qmul (.clk(clk), .rst_n(rst_n),
        .x(qi_x), .y(qi_y), .r(q_r), .v_in(qi_v), .tag_in(qi_s), .v_out(qo_v), .tag_out(qo_s),
        .v_soon(qn_v), .tag_soon(qn_s), .busy(q_busy));
    // results leave the multiplier's last register: q_r is valid in the cycle the tag says so;
    // q_{i+1} is used there directly (bypass into step 0) as well as kept
    wire q_arrive  = qo_v &&  qo_s;
    wire qa_arrive = qo_v && !qo_s;
    wire q_soon    = qn_v &&  qn_s;   // q_r holds q_{i+1} in the next cycle
    // what the q unit issues this cycle: qa at an iteration's start, q once qa and T_0' are ready
    wire qs_go = qa_rdy && (qz || t0_rdy);
    wire it_start = run && (t == 0);
    wire qa_go = it_start && (pre || !last_it || can_claim);
    // qa operands: this MontMult's a_0 and b_{i+1}, or the next MontMult's a_0 and b_0
    wire          qa_next = pre || last_it;
    wire          qa_bank = pre ? nbk : rb;
    always @(*) begin
        qi_v = qa_go || qs_go;
        qi_s = !qa_go;
        if (qa_go) begin
            qi_x = qa_next ? a0[qa_bank] : a0[cb];
            qi_y = qa_next ? b0[qa_bank] : b_rd;
        end else begin
            qi_x = (qz ? {W{1'b0}} : t0_reg) + qa_reg;
            qi_y = n0_q;
        end
    end

    // ============================================================================ sequencing
    wire q_here  = q_rdy || q_arrive || q_soon;   // q_{i+1} is usable in the next cycle
    wire it_done = run && (pre ? q_here : (t >= D - 1) && ((last_it && !chain) || q_here));
    wire claim_idle = !run && cfg_done && can_claim;
    wire claim_last = it_start && !pre && last_it && can_claim;
    wire claim = claim_idle || claim_last;

    assign in_ready  = rst_n && cfg_done && (ck == 0) && !full[wb];
    assign cfg_ready = rst_n && !run && !full[0] && !full[1] && (lj == 0) && !pipe_busy;
    reg    pb;
    integer v;
    always @(*) begin
        pb = top_pend || xk_step || xk_top || s0_v || sw_v || qi_v || q_busy;
        for (v = 0; v <= ST; v = v + 1) pb = pb || tg[v][TV];
    end
    assign pipe_busy = pb;
    assign out_valid = ofull[ub];
    assign out_z     = osel[ub] ? od_rd : ot_rd;
    assign out_last  = (uk == D - 1);
    assign idle      = !run && !pipe_busy && !full[0] && !full[1] && (lj == 0)
                       && !obusy[0] && !obusy[1];

    always @(posedge clk) begin
        if (!rst_n) begin
            full[0] <= 1'b0;  full[1] <= 1'b0;  wb <= 1'b0;  lj <= {JW{1'b0}};
            cfg_done <= 1'b0; ck <= {(JW+1){1'b0}};  kb <= {MBW{1'b0}};
            run <= 1'b0;  pre <= 1'b0;  chain <= 1'b0;  i <= {CW{1'b0}};  t <= {CW{1'b0}};
            cb <= 1'b0;  nbk <= 1'b0;  rb <= 1'b0;  ob <= 1'b0;  nob <= 1'b0;  ro <= 1'b0;
            obusy[0] <= 1'b0;  obusy[1] <= 1'b0;  ofull[0] <= 1'b0;  ofull[1] <= 1'b0;
            q_rdy <= 1'b0;  qa_rdy <= 1'b0;  t0_rdy <= 1'b0;  qz <= 1'b0;
            ub <= 1'b0;  uk <= {JW{1'b0}};
        end else begin
            // ---- modulus
            if (cf) begin
                if (ck == D) begin
                    ck <= {(JW+1){1'b0}};
                    if (kbs == NM - 1) begin
                        cfg_done <= 1'b1;  kb <= {MBW{1'b0}};
                    end else begin
                        kb <= kb + 1'b1;
                    end
                end else begin
                    cfg_done <= 1'b0;  ck <= ck + 1'b1;
                end
            end
            // ---- loader
            if (ld) begin
                if (lj == 0) begin
                    a0[wb] <= in_a;  b0[wb] <= in_b;  mbk[wb] <= (NM > 1) ? in_mb : {MBW{1'b0}};
                end
                if (lj == D - 1) begin
                    full[wb] <= 1'b1;  wb <= ~wb;  lj <= {JW{1'b0}};
                end else begin
                    lj <= lj + 1'b1;
                end
            end
            // ---- q unit bookkeeping
            if (qa_go) begin
                b_next <= qi_y;   // b_{i+1}, or the next MontMult's b_0
                qz     <= qa_next;
                q_mb   <= qa_next ? mbk[qa_bank] : mb_c;
            end
            if (qs_go) qa_rdy <= 1'b0;
            else if (qa_arrive) qa_rdy <= 1'b1;
            if (qa_arrive) qa_reg <= q_r;
            if (q_arrive) q_next <= q_r;
            if (qs_go) t0_rdy <= 1'b0;
            if (xk_step && x_j == 1 && !x_last) begin
                t0_reg <= s_sum[W-1:0];  t0_rdy <= 1'b1;
            end
            if (it_start && !pre) q_rdy <= 1'b0;     // consumed by this iteration's step 0
            else if (q_arrive) q_rdy <= 1'b1;
            // ---- claim the next MontMult's operand and result banks
            if (claim) begin
                nbk <= rb;  rb <= ~rb;  nob <= ro;  ro <= ~ro;  obusy[ro] <= 1'b1;
            end
            // ---- iterations
            if (claim_idle) begin
                run <= 1'b1;  pre <= 1'b1;  t <= {CW{1'b0}};
            end else if (run) begin
                if (it_start && !pre) begin
                    b_cur <= b_next;  q_cur <= q_in;
                end
                if (it_start && !pre && last_it) chain <= can_claim;
                if (issue && last_it && t == D - 1) full[cb] <= 1'b0;   // last read of the bank
                if (it_done) begin
                    t <= {CW{1'b0}};
                    if (pre || (last_it && chain)) begin
                        pre <= 1'b0;  i <= {CW{1'b0}};  cb <= nbk;  ob <= nob;
                    end else if (last_it) begin
                        run <= 1'b0;
                    end else begin
                        i <= i + 1'b1;
                    end
                end else begin
                    t <= t + 1'b1;
                end
            end
            // ---- results: complete after the top word's subtraction, then unloaded
            if (sw_v && sw_top) begin
                ofull[sw_ob] <= 1'b1;
                osel[sw_ob]  <= sw_tbit | ~d_sub[W];   // T >= M: top bit set or no borrow
            end
            if (out_valid && out_ready) begin
                if (uk == D - 1) begin
                    ofull[ub] <= 1'b0;  obusy[ub] <= 1'b0;  ub <= ~ub;  uk <= {JW{1'b0}};
                end else begin
                    uk <= uk + 1'b1;
                end
            end
        end
    end

`ifndef SYNTHESIS
    // invariants a simulation checks: T < 2M keeps the top word at 0 or 1; the q unit is never
    // asked for two things in one cycle
    always @(posedge clk) begin
        if (rst_n && xk_top && s_sum[WS-1:W+1] != 0)
            $display("unifl_mm_engine: ERROR top word of T above 1 at %0t", $time);
        if (rst_n && qa_go && qs_go)
            $display("unifl_mm_engine: ERROR q unit issue collision at %0t", $time);
    end
`endif
endmodule
`default_nettype wire
