#include "train/moe_train.h"

#include <algorithm>
#include <cstdio>
#include <functional>

#include "kernels/ops.h"
#include "model/moe.h"
#include "train/collectives.h"
#include "train/data_parallel.h"
#include "train/linear.h"
#include "train/watchdog.h"

namespace koi::train {
namespace {

void zero(std::vector<float>& buf, int64_t n) {
  ensure(buf, n);
  std::fill_n(buf.data(), n, 0.0f);
}

// SwiGLU forward of n rows: gate, up (n, F) = x W^T; sig = sigmoid(gate); h = gate * sig * up.
void swiglu_forward(ThreadPool* pool, const float* x, const float* wg, const float* wu, int64_t n, int64_t C,
                    int64_t F, std::vector<float>& gate, std::vector<float>& up, std::vector<float>& sig,
                    std::vector<float>& h) {
  ensure(gate, n * F);
  ensure(up, n * F);
  ensure(sig, n * F);
  ensure(h, n * F);
  linear_forward(pool, gate.data(), x, wg, nullptr, n, C, F);
  linear_forward(pool, up.data(), x, wu, nullptr, n, C, F);
  kernels::sigmoid(gate.data(), sig.data(), n * F);
  for (int64_t i = 0; i < n * F; ++i) h[i] = gate[i] * sig[i] * up[i];
}

// From dy (n, C) = d(h Wd^T): dWd, and through the SwiGLU dWg, dWu; dx (n, C) += d/dx.
void swiglu_backward(ThreadPool* pool, const float* dy, const float* x, const float* gate, const float* up,
                     const float* sig, const float* h, const float* wg, const float* wu, const float* wd, float* dwg,
                     float* dwu, float* dwd, float* dx, int64_t n, int64_t C, int64_t F, MoeScratch& s) {
  zero(s.dh, n * F);
  linear_backward(pool, s.dh.data(), dwd, nullptr, dy, h, wd, n, F, C);
  ensure(s.dgate, n * F);
  ensure(s.dup, n * F);
  for (int64_t i = 0; i < n * F; ++i) {
    s.dgate[i] = s.dh[i] * up[i] * sig[i] * (1.0f + gate[i] * (1.0f - sig[i]));
    s.dup[i] = s.dh[i] * gate[i] * sig[i];
  }
  linear_backward(pool, dx, dwg, nullptr, s.dgate.data(), x, wg, n, C, F);
  linear_backward(pool, dx, dwu, nullptr, s.dup.data(), x, wu, n, C, F);
}

// Expert parallel: who owns which experts and how many rows each rank routed to each.
struct EpLayout {
  int ranks, me;
  int64_t E;
  std::vector<Range> owned;             // per rank: its experts
  const std::vector<int64_t>* counts;   // (ranks, E)
  int64_t count(int r, int64_t e) const { return (*counts)[static_cast<size_t>(r * E + e)]; }
  // Rows rank `from` sends to rank `to`: those it routed to to's experts.
  int64_t rows(int from, int to) const {
    int64_t n = 0;
    for (int64_t e = owned[to].begin; e < owned[to].end; ++e) n += count(from, e);
    return n;
  }
};

// A failed collective of the MoE passes ends the job (their callers cannot return it).
void abort_on_error(Communicator& comm, const Status& s) {
  if (s.ok()) return;
  std::fprintf(stderr, "mixture of experts: %s\n", s.message().c_str());
  comm.abort(s.code() == StatusCode::kDeadlineExceeded ? kWatchdogExitCode : 1);
}

void ep_check(const ExpertParallel& ep, const Status& s) { abort_on_error(*ep.comm, s); }

// The layout of a forward pass whose row counts are in a.ep_counts.
EpLayout ep_layout(const ExpertParallel& ep, int64_t E, const MoeActs& a) {
  EpLayout layout{ep.comm->size(), ep.comm->rank(), E, {}, &a.ep_counts};
  for (int r = 0; r < layout.ranks; ++r) layout.owned.push_back(split_range(E, layout.ranks, r));
  return layout;
}

// Every rank's row count per expert, gathered into a.ep_counts (ranks, E).
void gather_counts(const ExpertParallel& ep, int64_t E, MoeActs& a) {
  const int R = ep.comm->size(), me = ep.comm->rank();
  std::vector<float> counts(static_cast<size_t>(R * E), 0.0f);  // exact: row counts < 2^24
  for (int64_t e = 0; e < E; ++e) counts[static_cast<size_t>(me * E + e)] = static_cast<float>(a.routed[e].size());
  const std::vector<int64_t> per_rank(static_cast<size_t>(R), E);
  ep_check(ep, ep.comm->allgather(counts.data(), per_rank, "allgather expert rows"));
  a.ep_counts.assign(counts.begin(), counts.end());
}

// The row of every local slot (row(slot), C floats) to the owner of its expert: sent per
// owner, its experts in order, each expert's slots ascending. Returns what this rank owns:
// per rank, per own expert, that rank's rows.
std::vector<float> to_owners(const ExpertParallel& ep, const EpLayout& L, const MoeActs& a, int64_t C,
                             const std::function<const float*(int32_t slot)>& row, const char* what) {
  std::vector<float> send;
  std::vector<int64_t> send_counts(static_cast<size_t>(L.ranks)), recv_counts(send_counts.size());
  int64_t recv_total = 0;
  for (int d = 0; d < L.ranks; ++d) {
    for (int64_t e = L.owned[d].begin; e < L.owned[d].end; ++e) {
      for (int32_t slot : a.routed[e]) send.insert(send.end(), row(slot), row(slot) + C);
    }
    send_counts[d] = L.rows(L.me, d) * C;
    recv_counts[d] = L.rows(d, L.me) * C;
    recv_total += recv_counts[d];
  }
  std::vector<float> recv(static_cast<size_t>(recv_total));
  ep_check(ep, ep.comm->alltoallv(send.data(), send_counts, recv.data(), recv_counts, what));
  return recv;
}

// Own expert e's rows of a to_owners() result, every rank's in rank order: out (n_e, C).
int64_t gather_expert(const EpLayout& L, const std::vector<float>& recv, int64_t e, int64_t C,
                      std::vector<float>& out) {
  int64_t n = 0, base = 0;
  for (int r = 0; r < L.ranks; ++r) n += L.count(r, e);
  ensure(out, n * C);
  float* dst = out.data();
  for (int r = 0; r < L.ranks; ++r) {
    int64_t offset = base;
    for (int64_t e2 = L.owned[L.me].begin; e2 < e; ++e2) offset += L.count(r, e2) * C;
    dst = std::copy_n(recv.data() + offset, L.count(r, e) * C, dst);
    base += L.rows(r, L.me) * C;
  }
  return n;
}

// The reverse of to_owners: per own expert its rows (n_e, C), stacked as gather_expert
// stacks them, back to the ranks that routed them; this rank's come into out (N*K, C) by slot.
void to_slots(const ExpertParallel& ep, const EpLayout& L, const MoeActs& a, int64_t C,
              const std::vector<std::vector<float>>& per_expert, float* out, const char* what) {
  std::vector<float> send;
  std::vector<int64_t> send_counts(static_cast<size_t>(L.ranks)), recv_counts(send_counts.size());
  int64_t recv_total = 0;
  for (int r = 0; r < L.ranks; ++r) {
    for (int64_t e = L.owned[L.me].begin; e < L.owned[L.me].end; ++e) {
      int64_t first = 0;  // rank r's first row in expert e's stack
      for (int r2 = 0; r2 < r; ++r2) first += L.count(r2, e);
      const float* rows = per_expert[e].data() + first * C;
      send.insert(send.end(), rows, rows + L.count(r, e) * C);
    }
    send_counts[r] = L.rows(r, L.me) * C;
    recv_counts[r] = L.rows(L.me, r) * C;
    recv_total += recv_counts[r];
  }
  std::vector<float> recv(static_cast<size_t>(recv_total));
  ep_check(ep, ep.comm->alltoallv(send.data(), send_counts, recv.data(), recv_counts, what));
  const float* src = recv.data();
  for (int d = 0; d < L.ranks; ++d) {
    for (int64_t e = L.owned[d].begin; e < L.owned[d].end; ++e) {
      for (int32_t slot : a.routed[e]) {
        std::copy_n(src, C, out + int64_t{slot} * C);
        src += C;
      }
    }
  }
}

// The experts' forward pass under expert parallelism: rows to the owners, their SwiGLU and
// down projection there, the outputs back into a.slot_out.
void ep_experts_forward(ThreadPool* pool, const model::ModelConfig& c, const MoeParams& p, const float* xn, MoeActs& a,
                        const ExpertParallel& ep) {
  const int64_t C = c.dim, E = c.moe.n_experts, K = c.moe.n_experts_used, F = c.moe.expert_ffn_dim;
  gather_counts(ep, E, a);
  const EpLayout L = ep_layout(ep, E, a);
  const std::vector<float> recv =
      to_owners(ep, L, a, C, [&](int32_t slot) { return xn + (slot / K) * C; }, "alltoall expert inputs");
  std::vector<std::vector<float>> y(static_cast<size_t>(E));
  for (int64_t e = L.owned[L.me].begin; e < L.owned[L.me].end; ++e) {
    const int64_t n = gather_expert(L, recv, e, C, a.xin[e]);
    if (n == 0) continue;
    swiglu_forward(pool, a.xin[e].data(), p.gate[e], p.up[e], n, C, F, a.gate[e], a.up[e], a.sig[e], a.h[e]);
    y[e].resize(static_cast<size_t>(n * C));
    linear_forward(pool, y[e].data(), a.h[e].data(), p.down[e], nullptr, n, F, C);
  }
  to_slots(ep, L, a, C, y, a.slot_out.data(), "alltoall expert outputs");
}

// Its backward: the slots' output gradients (s.dslot) to the owners, the experts' backward
// there (their weight gradients), the input gradients back and into dxn, experts in order.
void ep_experts_backward(ThreadPool* pool, const model::ModelConfig& c, const MoeParams& p, const MoeParams& g,
                         const MoeActs& a, float* dxn, int64_t N, MoeScratch& s, const ExpertParallel& ep) {
  const int64_t C = c.dim, E = c.moe.n_experts, K = c.moe.n_experts_used, F = c.moe.expert_ffn_dim;
  const EpLayout L = ep_layout(ep, E, a);
  const std::vector<float> recv = to_owners(
      ep, L, a, C, [&](int32_t slot) { return s.dslot.data() + int64_t{slot} * C; }, "alltoall expert output grads");
  std::vector<std::vector<float>> dx(static_cast<size_t>(E));
  std::vector<float> dy;
  for (int64_t e = L.owned[L.me].begin; e < L.owned[L.me].end; ++e) {
    const int64_t n = gather_expert(L, recv, e, C, dy);
    if (n == 0) continue;
    zero(s.dxin, n * C);
    swiglu_backward(pool, dy.data(), a.xin[e].data(), a.gate[e].data(), a.up[e].data(), a.sig[e].data(),
                    a.h[e].data(), p.gate[e], p.up[e], p.down[e], g.gate[e], g.up[e], g.down[e], s.dxin.data(), n, C,
                    F, s);
    dx[e].assign(s.dxin.begin(), s.dxin.begin() + n * C);
  }
  std::vector<float> dslot_x(static_cast<size_t>(N * K * C));
  to_slots(ep, L, a, C, dx, dslot_x.data(), "alltoall expert input grads");
  for (int64_t e = 0; e < E; ++e) {
    for (int32_t slot : a.routed[e]) add_into(dxn + (slot / K) * C, dslot_x.data() + int64_t{slot} * C, C);
  }
}

}  // namespace

void moe_forward(ThreadPool* pool, const model::ModelConfig& c, const MoeParams& p, const float* xn, float* out,
                 int64_t N, MoeActs& a, const ExpertParallel* ep, Communicator* batch_group) {
  const model::MoeConfig& m = c.moe;
  const int64_t C = c.dim, E = m.n_experts, K = m.n_experts_used, F = m.expert_ffn_dim;
  // Router: logits (N, E) = xn Wr^T; per token its K experts and weights.
  ensure(a.logits, N * E);
  ensure(a.probs, N * E);
  ensure(a.weights, N * K);
  a.experts.resize(static_cast<size_t>(N * K));
  linear_forward(pool, a.logits.data(), xn, p.router, nullptr, N, C, E);
  for (int64_t n = 0; n < N; ++n) {
    model::route_token(m, a.logits.data() + n * E, a.probs.data() + n * E, a.experts.data() + n * K,
                       a.weights.data() + n * K);
  }
  // Experts: each runs its SwiGLU on the rows routed to it; slot_out (N*K, C).
  a.routed.assign(static_cast<size_t>(E), {});
  for (int64_t i = 0; i < N * K; ++i) a.routed[a.experts[i]].push_back(static_cast<int32_t>(i));
  a.xin.resize(E), a.gate.resize(E), a.up.resize(E), a.sig.resize(E), a.h.resize(E);
  ensure(a.slot_out, N * K * C);
  std::vector<float> y;
  if (ep != nullptr) ep_experts_forward(pool, c, p, xn, a, *ep);
  for (int64_t e = 0; e < E && ep == nullptr; ++e) {
    const std::vector<int32_t>& rows = a.routed[e];
    const int64_t n = static_cast<int64_t>(rows.size());
    if (n == 0) continue;
    ensure(a.xin[e], n * C);
    for (int64_t r = 0; r < n; ++r) std::copy_n(xn + (rows[r] / K) * C, C, a.xin[e].data() + r * C);
    swiglu_forward(pool, a.xin[e].data(), p.gate[e], p.up[e], n, C, F, a.gate[e], a.up[e], a.sig[e], a.h[e]);
    ensure(y, n * C);
    linear_forward(pool, y.data(), a.h[e].data(), p.down[e], nullptr, n, F, C);
    for (int64_t r = 0; r < n; ++r) std::copy_n(y.data() + r * C, C, a.slot_out.data() + rows[r] * C);
  }
  // out[n] = sum_k w[n, k] slot_out[n*K + k]
  std::fill_n(out, N * C, 0.0f);
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t k = 0; k < K; ++k) {
      kernels::axpy(a.weights[n * K + k], a.slot_out.data() + (n * K + k) * C, out + n * C, C);
    }
  }
  // Load balance: f_e = count_e / (N K), P_e = mean_n probs[n, e]; aux = E sum_e f_e P_e.
  // With a batch group: counts and probability sums of every rank's tokens (the whole batch).
  std::vector<double> stats(static_cast<size_t>(2 * E), 0.0);  // count_e, then sum_n probs[n, e]
  for (int64_t e = 0; e < E; ++e) {
    stats[e] = static_cast<double>(a.routed[e].size());
    for (int64_t n = 0; n < N; ++n) stats[E + e] += a.probs[n * E + e];
  }
  int64_t N_all = N;
  if (batch_group != nullptr && batch_group->size() > 1) {
    N_all = N * batch_group->size();
    abort_on_error(*batch_group, batch_group->allreduce_sum(stats.data(), 2 * E, "allreduce router load"));
  }
  a.frac.assign(static_cast<size_t>(E), 0.0f);
  double aux = 0.0;
  for (int64_t e = 0; e < E; ++e) {
    a.frac[e] = static_cast<float>(stats[e]) / static_cast<float>(N_all * K);
    aux += a.frac[e] * stats[E + e] / static_cast<double>(N_all);
  }
  a.aux = static_cast<float>(E * aux);
  if (m.shared_ffn_dim == 0) return;
  // Shared expert: out[n] += sigmoid(ws . xn[n]) * (h_s Wsd^T)[n]   h_s (N, Fs)
  const int64_t Fs = m.shared_ffn_dim;
  swiglu_forward(pool, xn, p.shared_gate, p.shared_up, N, C, Fs, a.s_gate, a.s_up, a.s_sig, a.s_h);
  ensure(a.s_out, N * C);
  ensure(a.s_scale, N);
  linear_forward(pool, a.s_out.data(), a.s_h.data(), p.shared_down, nullptr, N, Fs, C);
  for (int64_t n = 0; n < N; ++n) {
    const float logit = kernels::dot(p.shared_gate_inp, xn + n * C, C);
    kernels::sigmoid(&logit, &a.s_scale[n], 1);
    kernels::axpy(a.s_scale[n], a.s_out.data() + n * C, out + n * C, C);
  }
}

// With y = sum_k w_k E_k(x) + s(x) S(x):
//   d E_k(x) = w_k dy;  dw_k = dy . E_k(x);  ds = dy . S(x);  d S(x) = s dy.
// Routing weights w_k = p_{e_k} (/ sum_j p_{e_j} when renormalised), so with S = that sum
//   dp_{e_k} = (dw_k - sum_j dw_j w_j) / S   (renormalised),   dw_k   (not);
// the aux loss adds aux_scale * E * f_e / N to every dp_{n, e}; then through the softmax
//   dlogit_e = p_e (dp_e - sum_i p_i dp_i).
void moe_backward(ThreadPool* pool, const model::ModelConfig& c, const MoeParams& p, const MoeParams& g,
                  const float* dout, const float* xn, const MoeActs& a, float aux_scale, float* dxn, int64_t N,
                  MoeScratch& s, const ExpertParallel* ep) {
  const model::MoeConfig& m = c.moe;
  const int64_t C = c.dim, E = m.n_experts, K = m.n_experts_used, F = m.expert_ffn_dim;
  ensure(s.dslot, N * K * C);
  ensure(s.dw, K);
  zero(s.dprobs, N * E);
  for (int64_t n = 0; n < N; ++n) {
    const float* dy = dout + n * C;
    float* dp = s.dprobs.data() + n * E;
    float* dw = s.dw.data();
    float sum_dw_w = 0.0f, sum_p = 0.0f;
    for (int64_t k = 0; k < K; ++k) {
      const int64_t row = n * K + k;
      const float w = a.weights[row];
      for (int64_t i = 0; i < C; ++i) s.dslot[row * C + i] = w * dy[i];
      dw[k] = kernels::dot(dy, a.slot_out.data() + row * C, C);
      sum_dw_w += dw[k] * w;
      sum_p += a.probs[n * E + a.experts[row]];
    }
    for (int64_t k = 0; k < K; ++k) {
      dp[a.experts[n * K + k]] = m.norm_topk_prob ? (dw[k] - sum_dw_w) / sum_p : dw[k];
    }
    for (int64_t e = 0; e < E; ++e) dp[e] += aux_scale * static_cast<float>(E) * a.frac[e] / static_cast<float>(N);
  }
  ensure(s.dlogits, N * E);
  for (int64_t n = 0; n < N; ++n) {
    const float* pr = a.probs.data() + n * E;
    const float* dp = s.dprobs.data() + n * E;
    const float dot = kernels::dot(pr, dp, E);
    for (int64_t e = 0; e < E; ++e) s.dlogits[n * E + e] = pr[e] * (dp[e] - dot);
  }
  linear_backward(pool, dxn, g.router, nullptr, s.dlogits.data(), xn, p.router, N, C, E);
  // Experts, in index order; each adds its rows' input gradients into their tokens' dxn.
  if (ep != nullptr) ep_experts_backward(pool, c, p, g, a, dxn, N, s, *ep);
  for (int64_t e = 0; e < E && ep == nullptr; ++e) {
    const std::vector<int32_t>& rows = a.routed[e];
    const int64_t n = static_cast<int64_t>(rows.size());
    if (n == 0) continue;
    ensure(s.dy, n * C);
    for (int64_t r = 0; r < n; ++r) std::copy_n(s.dslot.data() + rows[r] * C, C, s.dy.data() + r * C);
    zero(s.dxin, n * C);
    swiglu_backward(pool, s.dy.data(), a.xin[e].data(), a.gate[e].data(), a.up[e].data(), a.sig[e].data(),
                    a.h[e].data(), p.gate[e], p.up[e], p.down[e], g.gate[e], g.up[e], g.down[e], s.dxin.data(), n, C,
                    F, s);
    for (int64_t r = 0; r < n; ++r) add_into(dxn + (rows[r] / K) * C, s.dxin.data() + r * C, C);
  }
  if (m.shared_ffn_dim == 0) return;
  // Shared expert and its gate: dlogit = ds * s (1 - s); dws += dlogit xn; dxn += dlogit ws.
  const int64_t Fs = m.shared_ffn_dim;
  ensure(s.dy, N * C);
  for (int64_t n = 0; n < N; ++n) {
    const float* dy = dout + n * C;
    const float sc = a.s_scale[n];
    const float dlogit = kernels::dot(dy, a.s_out.data() + n * C, C) * sc * (1.0f - sc);
    kernels::axpy(dlogit, xn + n * C, g.shared_gate_inp, C);
    kernels::axpy(dlogit, p.shared_gate_inp, dxn + n * C, C);
    for (int64_t i = 0; i < C; ++i) s.dy[n * C + i] = sc * dy[i];
  }
  swiglu_backward(pool, s.dy.data(), xn, a.s_gate.data(), a.s_up.data(), a.s_sig.data(), a.s_h.data(), p.shared_gate,
                  p.shared_up, p.shared_down, g.shared_gate, g.shared_up, g.shared_down, dxn, N, C, Fs, s);
}

}  // namespace koi::train
