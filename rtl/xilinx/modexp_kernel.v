// Vitis RTL kernels around the exponentiation unit (rtl/unifl_modexp.v): the same names and argument
// lists as the OpenCL kernels mont_exp_L<n> and paillier_enc_L<n> of
// unifl/backends/fpga/kernels/montmul.cl (mode modexp), so the fpga backend's host code launches
// them from an .xclbin unchanged.  One module, unifl_vitis_modexp, with ENC = 0 (mont_exp) or 1
// (paillier_enc):
//
//   mont_exp_L<D>(const ulong *base, const ulong *exps, ulong *out, ulong *scratch,
//                 const ulong *consts, ulong n0, uint n, uint le, uint e_stride, uint ebits, uint w)
//   out[i] = x_i^e_i R mod m for base[i] = x_i R mod m (Montgomery form in and out), i < n;
//   rows of D 64-bit words, least significant first; e_i = exps[i e_stride .. + le] (e_stride 0:
//   one exponent for all); consts = [m (D words), R mod m (D words)]; n0 = -m^-1 mod 2^64.
//   The unit uses its own fixed K-bit windows over ceil(ebits / K) windows: w (the host's window
//   choice) and scratch (the OpenCL kernel's table) are accepted and not used -- the table lives
//   in the unit's block RAM.  Results are the same whatever the window: x^e R mod m, below m.
//   A base at or above m is reduced on entry (any value below 2^(64 D) is accepted).
//
//   paillier_enc_L<D>(const ulong *msg, const ulong *rnd, const ulong *nexp, ulong *out,
//                     ulong *scratch, const ulong *consts, ulong n0, uint n, uint le, uint ebits,
//                     uint w)
//   out[i] = (1 + msg_i n) rnd_i^n R mod n^2 (Montgomery form), msg_i, rnd_i rows of le words
//   (< n), nexp = n (le words, ebits bits), consts = [n^2, R mod n^2, R^2 mod n^2, n R mod n^2]
//   (D words each): the unit's ENC job, m and r in, the ciphertext out.
//   Registers: 0x10 msg, 0x18 rnd, 0x20 nexp, 0x28 out, 0x30 scratch, 0x38 consts, 0x40 n0,
//   0x48 n, 0x50 le, 0x58 ebits, 0x60 w, 0x68 status.
//
// Interfaces and control: as montmul_kernel.v (ap_ctrl_hs, AXI4-Lite slave, one 64-bit AXI4
// master); registers 0x10 base, 0x18 exps, 0x20 out, 0x28 scratch, 0x30 consts (64-bit
// pointers), 0x38 n0 (64-bit), 0x40 n, 0x48 le, 0x50 e_stride, 0x58 ebits, 0x60 w (32-bit), and
// 0x68 status (R): sticky bits of the last run -- 0 an RRESP error, 1 a BRESP error, 2 an
// exponent longer than the unit holds (ebits > 64 * 2^ceil(log2 D)).
//
// Errors reach an OpenCL host, which cannot read registers, in the data: after an RRESP error or
// with an exponent too long every result row written from then on is all ones -- above any m, a
// value no exponentiation returns -- and the host checks every row against m.  A write that fails
// (BRESP) leaves the host's own fill of out (all ones) in place, which the same check catches.
//
// Data path: one read stream -- consts, then per row the base row and the exponent row (cut at
// MAX_BURST beats and 4 KiB; issued only when the read FIFO has room for the whole burst) -- is
// turned into the unit's cfg stream (m, n0, R mod m, two unused constants) and job stream (a
// header, the base, the exponent words, zero words up to the unit's exponent length); results go
// through an out FIFO into write bursts, as in montmul_kernel.v; ap_done once every write
// response is back.
`timescale 1ns / 1ps
`default_nettype none

module unifl_vitis_modexp #(
    parameter integer D = 16,                    // 64-bit words per operand (16: 1024-bit, 32: 2048)
    parameter integer NE = 2,                    // engines in the unit
    parameter integer K = 4,                     // window bits of the unit
    parameter integer ENC = 0,                   // 0: mont_exp_L<D>, 1: paillier_enc_L<D>
    parameter integer FIFO_DEPTH = 512,
    parameter integer MAX_BURST = 256,
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
    localparam integer PAGE_WORDS = 4096 / (W / 8);
    localparam integer JW = (D < 2) ? 1 : $clog2(D);
    localparam integer EWMAX = 1 << JW;                  // exponent words the unit holds

    // ---------------------------------------------------------------- reset (pipelined, UG1393)
    reg rst_n_q = 1'b0;
    always @(posedge ap_clk) rst_n_q <= ap_rst_n;

    // ---------------------------------------------------------------- AXI4-Lite control slave
    // the two argument lists (an address of 0xFxx: no such argument in this kernel)
    localparam [11:0] A_CTRL = 12'h00, A_GIE = 12'h04, A_IER = 12'h08, A_ISR = 12'h0C,
                      A_M_LO  = ENC ? 12'h10 : 12'hF00, A_M_HI  = ENC ? 12'h14 : 12'hF04,
                      A_X_LO  = ENC ? 12'h18 : 12'h10,  A_X_HI  = ENC ? 12'h1C : 12'h14,
                      A_E_LO  = ENC ? 12'h20 : 12'h18,  A_E_HI  = ENC ? 12'h24 : 12'h1C,
                      A_O_LO  = ENC ? 12'h28 : 12'h20,  A_O_HI  = ENC ? 12'h2C : 12'h24,
                      A_S_LO  = ENC ? 12'h30 : 12'h28,  A_S_HI  = ENC ? 12'h34 : 12'h2C,
                      A_C_LO  = ENC ? 12'h38 : 12'h30,  A_C_HI  = ENC ? 12'h3C : 12'h34,
                      A_N0_LO = ENC ? 12'h40 : 12'h38,  A_N0_HI = ENC ? 12'h44 : 12'h3C,
                      A_N     = ENC ? 12'h48 : 12'h40,  A_LE    = ENC ? 12'h50 : 12'h48,
                      A_ES    = ENC ? 12'hF08 : 12'h50, A_EB    = 12'h58, A_W = 12'h60,
                      A_STATUS = 12'h68;

    reg        reg_start, reg_done, reg_ready, reg_gie;
    reg [1:0]  reg_ier, reg_isr;
    reg [63:0] arg_m, arg_x, arg_e, arg_out, arg_s, arg_consts, arg_n0;
    reg [31:0] arg_n, arg_le, arg_es, arg_eb, arg_w;
    reg [2:0]  status;             // sticky: 0 RRESP error, 1 BRESP error, 2 exponent too long
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
            arg_m <= 64'd0; arg_x <= 64'd0; arg_e <= 64'd0; arg_out <= 64'd0; arg_s <= 64'd0;
            arg_consts <= 64'd0; arg_n0 <= 64'd0; arg_n <= 32'd0; arg_le <= 32'd0;
            arg_es <= 32'd0; arg_eb <= 32'd0; arg_w <= 32'd0;
        end else begin
            // ---- writes
            if (ctl_wr) begin
                ctl_bvalid <= 1'b1;
                case (ctl_waddr)
                    A_CTRL:  if (s_axi_control_WSTRB[0] && s_axi_control_WDATA[0]) reg_start <= 1'b1;
                    A_GIE:   if (s_axi_control_WSTRB[0]) reg_gie <= s_axi_control_WDATA[0];
                    A_IER:   if (s_axi_control_WSTRB[0]) reg_ier <= s_axi_control_WDATA[1:0];
                    A_M_LO:  arg_m[31:0]       <= merge(arg_m[31:0], s_axi_control_WDATA, s_axi_control_WSTRB);
                    A_M_HI:  arg_m[63:32]      <= merge(arg_m[63:32], s_axi_control_WDATA, s_axi_control_WSTRB);
                    A_X_LO:  arg_x[31:0]       <= merge(arg_x[31:0], s_axi_control_WDATA, s_axi_control_WSTRB);
                    A_X_HI:  arg_x[63:32]      <= merge(arg_x[63:32], s_axi_control_WDATA, s_axi_control_WSTRB);
                    A_E_LO:  arg_e[31:0]       <= merge(arg_e[31:0], s_axi_control_WDATA, s_axi_control_WSTRB);
                    A_E_HI:  arg_e[63:32]      <= merge(arg_e[63:32], s_axi_control_WDATA, s_axi_control_WSTRB);
                    A_O_LO:  arg_out[31:0]     <= merge(arg_out[31:0], s_axi_control_WDATA, s_axi_control_WSTRB);
                    A_O_HI:  arg_out[63:32]    <= merge(arg_out[63:32], s_axi_control_WDATA, s_axi_control_WSTRB);
                    A_S_LO:  arg_s[31:0]       <= merge(arg_s[31:0], s_axi_control_WDATA, s_axi_control_WSTRB);
                    A_S_HI:  arg_s[63:32]      <= merge(arg_s[63:32], s_axi_control_WDATA, s_axi_control_WSTRB);
                    A_C_LO:  arg_consts[31:0]  <= merge(arg_consts[31:0], s_axi_control_WDATA, s_axi_control_WSTRB);
                    A_C_HI:  arg_consts[63:32] <= merge(arg_consts[63:32], s_axi_control_WDATA, s_axi_control_WSTRB);
                    A_N0_LO: arg_n0[31:0]      <= merge(arg_n0[31:0], s_axi_control_WDATA, s_axi_control_WSTRB);
                    A_N0_HI: arg_n0[63:32]     <= merge(arg_n0[63:32], s_axi_control_WDATA, s_axi_control_WSTRB);
                    A_N:     arg_n             <= merge(arg_n, s_axi_control_WDATA, s_axi_control_WSTRB);
                    A_LE:    arg_le            <= merge(arg_le, s_axi_control_WDATA, s_axi_control_WSTRB);
                    A_ES:    arg_es            <= merge(arg_es, s_axi_control_WDATA, s_axi_control_WSTRB);
                    A_EB:    arg_eb            <= merge(arg_eb, s_axi_control_WDATA, s_axi_control_WSTRB);
                    A_W:     arg_w             <= merge(arg_w, s_axi_control_WDATA, s_axi_control_WSTRB);
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
                    A_M_LO:  ctl_rdata <= arg_m[31:0];
                    A_M_HI:  ctl_rdata <= arg_m[63:32];
                    A_X_LO:  ctl_rdata <= arg_x[31:0];
                    A_X_HI:  ctl_rdata <= arg_x[63:32];
                    A_E_LO:  ctl_rdata <= arg_e[31:0];
                    A_E_HI:  ctl_rdata <= arg_e[63:32];
                    A_O_LO:  ctl_rdata <= arg_out[31:0];
                    A_O_HI:  ctl_rdata <= arg_out[63:32];
                    A_S_LO:  ctl_rdata <= arg_s[31:0];
                    A_S_HI:  ctl_rdata <= arg_s[63:32];
                    A_C_LO:  ctl_rdata <= arg_consts[31:0];
                    A_C_HI:  ctl_rdata <= arg_consts[63:32];
                    A_N0_LO: ctl_rdata <= arg_n0[31:0];
                    A_N0_HI: ctl_rdata <= arg_n0[63:32];
                    A_N:     ctl_rdata <= arg_n;
                    A_LE:    ctl_rdata <= arg_le;
                    A_ES:    ctl_rdata <= arg_es;
                    A_EB:    ctl_rdata <= arg_eb;
                    A_W:     ctl_rdata <= arg_w;
                    A_STATUS: ctl_rdata <= {29'd0, status};
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
    localparam [1:0] S_IDLE = 2'd0, S_RUN = 2'd1, S_DONE = 2'd2;
    reg  [1:0]  state;
    reg  [63:0] run_n0;
    reg  [31:0] run_n;
    reg  [15:0] nwin;
    reg  [JW:0] ewj, ewr;          // exponent words per job; of them read from memory
    reg  [JW:0] xr;                // words of an x (and m) row read from memory: D, or le for ENC
    reg  [63:0] run_x, run_m, run_e;  // the arguments of the run (copied at ap_start)
    reg  [31:0] run_es;
    reg         poison;
    assign run_idle       = (state == S_IDLE);
    assign run_take_start = (state == S_IDLE) && reg_start;
    assign run_done_pulse = (state == S_DONE);
    // geometry of the launch from the arguments
    wire [31:0] nw_arg  = (arg_eb == 0) ? 32'd1 : (arg_eb + K - 1) / K;
    wire        too_long = nw_arg * K > EWMAX * W;
    wire [31:0] ewj_arg = (nw_arg * K + W - 1) / W;

    // ---------------------------------------------------------------- exponentiation unit
    wire         u_cfg_valid, u_cfg_ready, u_in_valid, u_in_ready, u_out_valid, u_out_ready;
    wire         u_out_last, u_idle;
    wire [W-1:0] u_cfg_data, u_in_data, u_out_data;
    unifl_modexp #(.W(W), .D(D), .NE(NE), .S(2), .K(K), .NM(1)) unit (
        .clk(ap_clk), .rst_n(rst_n_q),
        .cfg_valid(u_cfg_valid), .cfg_ready(u_cfg_ready), .cfg_data(u_cfg_data),
        .in_valid(u_in_valid), .in_ready(u_in_ready), .in_data(u_in_data),
        .out_valid(u_out_valid), .out_ready(u_out_ready), .out_data(u_out_data),
        .out_last(u_out_last), .idle(u_idle));

    function [9:0] page_room(input [63:0] addr);
        page_room = PAGE_WORDS - addr[11:3];
    endfunction

    // ---------------------------------------------------------------- read requests
    // the list: consts (2D words), then per row: base (D words), exponent (ewr words)
    localparam [2:0] Q_C = 3'd0, Q_X = 3'd1, Q_M = 3'd2, Q_E = 3'd3, Q_END = 3'd4;
    reg  [2:0]  q_kind;
    reg  [63:0] q_addr;
    reg  [15:0] q_left;                              // words of the request not yet asked for
    reg  [31:0] q_row;
    reg         ar_valid;
    reg  [63:0] ar_addr;
    reg  [8:0]  ar_beats;
    reg  [FA:0] credit_used;                         // read FIFO words reserved
    wire [9:0]  q_room = page_room(q_addr);
    wire [9:0]  q_cap = (q_room < MAX_BURST) ? q_room : MAX_BURST[9:0];
    wire [8:0]  q_next = (q_left < q_cap) ? q_left[8:0] : q_cap[8:0];
    wire        pop_r;
    wire        issue_ar = (state == S_RUN) && !ar_valid && (q_left != 0)
                           && ({1'b0, credit_used} + q_next <= FIFO_DEPTH);
    assign m_axi_gmem_ARVALID = ar_valid;
    assign m_axi_gmem_ARADDR  = ar_addr[C_M_AXI_GMEM_ADDR_WIDTH-1:0];
    assign m_axi_gmem_ARLEN   = ar_beats - 9'd1;
    assign m_axi_gmem_ARSIZE  = 3'd3;
    assign m_axi_gmem_ARBURST = 2'b01;

    // ---------------------------------------------------------------- read FIFO
    reg [W-1:0] fifo_r [0:FIFO_DEPTH-1];
    reg [FA:0]  r_wr, r_rd;
    wire [FA:0] r_count = r_wr - r_rd;
    assign m_axi_gmem_RREADY = (state == S_RUN) && (r_count != FIFO_DEPTH);
    wire r_fire = m_axi_gmem_RVALID && m_axi_gmem_RREADY;
    always @(posedge ap_clk)
        if (r_fire) fifo_r[r_wr[FA-1:0]] <= m_axi_gmem_RDATA;
    wire [W-1:0] r_head = fifo_r[r_rd[FA-1:0]];
    wire         r_have = (r_count != 0);

    // ---------------------------------------------------------------- feeder
    // cfg: M (D, read), n0' (made), R mod M (D, read), R^2 and n R (2D zeros: unused by MODEXP
    // jobs with Montgomery entry and exit); then per row: header, base (D, read), exponent
    // (ewr, read), zeros up to ewj
    localparam [3:0] F_M = 4'd0, F_N0 = 4'd1, F_RM = 4'd2, F_Z = 4'd3, F_HDR = 4'd4, F_X = 4'd5,
                     F_E = 4'd6, F_P = 4'd7, F_XP = 4'd8, F_MW = 4'd9, F_MP = 4'd10;
    reg  [3:0]  f_ph;
    reg  [15:0] f_j;
    reg  [31:0] f_row;
    reg         f_on;                                // rows left to feed
    wire        f_cfg = (f_ph <= F_Z);
    // ENC reads all four constants; MODEXP sends zeros for R^2 and n R
    wire        f_read = (f_ph == F_M || f_ph == F_RM || f_ph == F_X || f_ph == F_E
                          || f_ph == F_MW || (f_ph == F_Z && ENC));
    wire        f_have = f_read ? r_have : 1'b1;
    wire [W-1:0] f_word = f_read ? r_head
                        : (f_ph == F_N0) ? run_n0
                        : (f_ph == F_HDR) ? {32'd0, nwin, 12'd0, ENC ? 4'd5 : 4'd0}  // ENC: plain r in
                        : {W{1'b0}};
    assign u_cfg_valid = (state == S_RUN) && f_on && f_cfg && f_have;
    assign u_in_valid  = (state == S_RUN) && f_on && !f_cfg && f_have;
    assign u_cfg_data  = f_word;
    assign u_in_data   = f_word;
    wire f_take = (u_cfg_valid && u_cfg_ready) || (u_in_valid && u_in_ready);
    assign pop_r = f_take && f_read;
    // the length of the current feeder phase
    wire [15:0] f_len = (f_ph == F_M || f_ph == F_RM) ? D
                      : (f_ph == F_X || f_ph == F_MW) ? {{(15-JW){1'b0}}, xr}
                      : (f_ph == F_XP || f_ph == F_MP) ? D - {{(15-JW){1'b0}}, xr}
                      : (f_ph == F_Z) ? 2 * D
                      : (f_ph == F_E) ? {{(15-JW){1'b0}}, ewr}
                      : (f_ph == F_P) ? {{(15-JW){1'b0}}, ewj - ewr} : 16'd1;

    // ---------------------------------------------------------------- write side (as montmul_kernel.v)
    reg [W-1:0] fifo_o [0:FIFO_DEPTH-1];
    reg [FA:0]  o_wr, o_rd;
    wire [FA:0] o_count = o_wr - o_rd;
    assign u_out_ready = (o_count != FIFO_DEPTH);
    wire push_o = u_out_valid && u_out_ready;
    always @(posedge ap_clk)
        if (push_o) fifo_o[o_wr[FA-1:0]] <= u_out_data;
    reg  [63:0] wr_addr;
    reg  [39:0] wr_left;
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
    // poisoned rows: all ones, above any modulus (see the header)
    assign m_axi_gmem_WDATA   = poison ? {W{1'b1}} : fifo_o[o_rd[FA-1:0]];
    assign m_axi_gmem_WSTRB   = {(C_M_AXI_GMEM_DATA_WIDTH/8){1'b1}};
    assign m_axi_gmem_WLAST   = (w_sent == w_beats - 9'd1);
    assign m_axi_gmem_BREADY  = 1'b1;
    wire w_fire = m_axi_gmem_WVALID && m_axi_gmem_WREADY;
    wire aw_fire = aw_valid && m_axi_gmem_AWREADY;
    wire w_burst_end = w_active && !aw_valid && (w_sent == w_beats);

    // ---------------------------------------------------------------- main sequencer
    always @(posedge ap_clk) begin
        if (!rst_n_q) begin
            state <= S_IDLE;
            ar_valid <= 1'b0; aw_valid <= 1'b0; w_active <= 1'b0;
            r_wr <= 0; r_rd <= 0; o_wr <= 0; o_rd <= 0; credit_used <= 0;
            q_kind <= Q_END; q_left <= 0; q_row <= 0;
            f_ph <= F_M; f_j <= 0; f_row <= 0; f_on <= 1'b0;
            wr_left <= 0; bursts_issued <= 0; bursts_acked <= 0;
            w_beats <= 9'd1; w_sent <= 0; ar_beats <= 9'd1;
            status <= 3'd0; poison <= 1'b0; run_n0 <= 0; run_n <= 0;
            nwin <= 16'd1; ewj <= 1; ewr <= 0;
        end else begin
            if (r_fire) begin
                r_wr <= r_wr + 1'b1;
                if (m_axi_gmem_RRESP != 2'b00) begin
                    status[0] <= 1'b1;  poison <= 1'b1;
                end
            end
            if (pop_r) r_rd <= r_rd + 1'b1;
            if (push_o) o_wr <= o_wr + 1'b1;
            if (w_fire) o_rd <= o_rd + 1'b1;
            if (m_axi_gmem_BVALID) begin
                bursts_acked <= bursts_acked + 1'b1;
                if (m_axi_gmem_BRESP != 2'b00) status[1] <= 1'b1;
            end
            credit_used <= credit_used + (issue_ar ? q_next : 9'd0) - (pop_r ? 1'b1 : 1'b0);

            case (state)
            S_IDLE: if (reg_start) begin
                run_n0 <= arg_n0;
                run_n <= arg_n;
                status <= {too_long, 2'b00};
                poison <= too_long;
                nwin <= too_long ? 16'd1 : nw_arg[15:0];
                ewj <= too_long ? 1 : ewj_arg[JW:0];
                ewr <= too_long ? 0 : ((arg_le < ewj_arg) ? arg_le[JW:0] : ewj_arg[JW:0]);
                run_x <= arg_x;  run_m <= arg_m;  run_e <= arg_e;
                run_es <= ENC ? 32'd0 : arg_es;       // ENC: one exponent, n, for every row
                q_kind <= Q_C; q_addr <= arg_consts; q_left <= ENC ? 4 * D : 2 * D; q_row <= 0;
                xr <= ENC ? ((arg_le < D) ? arg_le[JW:0] : D) : D;
                f_ph <= F_M; f_j <= 0; f_row <= 0; f_on <= (arg_n != 0);
                wr_addr <= arg_out;
                wr_left <= arg_n * D;
                bursts_issued <= 0;
                bursts_acked <= 0;
                state <= (arg_n == 32'd0) ? S_DONE : S_RUN;
            end
            S_RUN: begin
                // ---------------- read requests
                if (ar_valid) begin
                    if (m_axi_gmem_ARREADY) ar_valid <= 1'b0;
                end else if (issue_ar) begin
                    ar_valid <= 1'b1; ar_addr <= q_addr; ar_beats <= q_next;
                    q_addr <= q_addr + {q_next, 3'b000};
                    q_left <= q_left - q_next;
                end else if (q_left == 0 && q_kind != Q_END) begin
                    // the next request of the list: consts, then per row x (r), [m], exponent
                    if (q_kind == Q_E || (q_kind != Q_C && ewr == 0
                                          && (q_kind == Q_M || (q_kind == Q_X && !ENC)))
                            || q_kind == Q_C) begin
                        if (q_kind != Q_C && q_row + 1 == run_n) begin
                            q_kind <= Q_END;
                        end else begin
                            if (q_kind != Q_C) q_row <= q_row + 1'b1;
                            q_kind <= Q_X;
                            q_addr <= run_x + (((q_kind == Q_C) ? 64'd0 : q_row + 1) * xr << 3);
                            q_left <= xr;
                        end
                    end else if (q_kind == Q_X && ENC) begin
                        q_kind <= Q_M;
                        q_addr <= run_m + ((q_row * xr) << 3);
                        q_left <= xr;
                    end else begin
                        q_kind <= Q_E;
                        q_addr <= run_e + ((q_row * run_es) << 3);
                        q_left <= ewr;
                    end
                end
                // ---------------- feeder
                if (f_take) begin
                    if (f_j + 1 == f_len) begin
                        f_j <= 0;
                        case (f_ph)
                            F_M: f_ph <= F_N0;
                            F_N0: f_ph <= F_RM;
                            F_RM: f_ph <= F_Z;
                            F_Z: f_ph <= F_HDR;
                            F_HDR: f_ph <= (xr != 0) ? F_X : F_XP;
                            F_X, F_XP: f_ph <= (f_ph == F_X && xr != D) ? F_XP
                                              : ENC ? ((xr != 0) ? F_MW : F_MP)
                                              : (ewr != 0) ? F_E : F_P;
                            F_MW, F_MP: f_ph <= (f_ph == F_MW && xr != D) ? F_MP
                                              : (ewr != 0) ? F_E : F_P;
                            F_E: f_ph <= (ewj != ewr) ? F_P : F_HDR;
                            default: f_ph <= F_HDR;
                        endcase
                        if ((f_ph == F_E && ewj == ewr) || f_ph == F_P) begin
                            f_row <= f_row + 1'b1;
                            if (f_row + 1 == run_n) f_on <= 1'b0;
                        end
                    end else begin
                        f_j <= f_j + 1'b1;
                    end
                end
                // ---------------- write bursts
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
                if (wr_left == 0 && !w_active && bursts_acked == bursts_issued)
                    state <= S_DONE;
            end
            S_DONE: state <= S_IDLE;
            default: state <= S_IDLE;
            endcase
        end
    end
endmodule

// The kernel names the host launches: mont_exp_L<limbs> and paillier_enc_L<limbs> (n^2 of a
// 1024- and a 2048-bit key).
`define UNIFL_VITIS_MODEXP_TOP(TOP, WORDS, IS_ENC) \
module TOP #(parameter integer N = 2, parameter integer FIFO_DEPTH = 512, \
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
    unifl_vitis_modexp #(.D(WORDS), .NE(N), .ENC(IS_ENC), .FIFO_DEPTH(FIFO_DEPTH), .MAX_BURST(MAX_BURST)) core ( \
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

`UNIFL_VITIS_MODEXP_TOP(mont_exp_L16, 16, 0)
`UNIFL_VITIS_MODEXP_TOP(mont_exp_L32, 32, 0)
`UNIFL_VITIS_MODEXP_TOP(paillier_enc_L32, 32, 1)
`UNIFL_VITIS_MODEXP_TOP(paillier_enc_L64, 64, 1)

`undef UNIFL_VITIS_MODEXP_TOP
`default_nettype wire
