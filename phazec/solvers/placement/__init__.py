"""The model of time and memory of a training plan, and the optimal placement over it (the C++ DP, typed).

The model, in seconds and bytes, shared by the C++ DP (`phazec._core`) and `evaluate_plan`:

* Plan. The layers are split into `s` stages in pipeline order; a stage is the difference of two
  downsets of the layer DAG, so no edge runs from a later stage to an earlier one. Stages are
  counted from the end for memory: under 1F1B the stage at position `p` from the end (the last
  stage has p = 1) keeps `p` microbatches in flight (at most the m there are). A stage runs on `t`
  devices when it holds a tensor-parallel layer, else on one device; a pipeline uses `k` devices
  in all, and `d` replicas of it run data-parallel, each on `m = ceil(microbatches / d)`
  microbatches. A plan needs `d * k <= devices` and `d <= microbatches`, and with expert
  parallelism `ep` (a MoE model) `d * t` a multiple of ep: the expert-parallel groups tile each
  stage's devices.
* Device numbering. Device ids run 0..devices-1; tier `i` links aligned groups of
  `group_size_i` consecutive ids (ids a and b share a group iff a // g == b // g). Replica r
  holds ids r*k .. r*k + k - 1, its stages in pipeline order. A set of devices talks over the first
  tier whose aligned group holds all of them.
* Execution settings (Megatron-LM's): recompute mode r in {none, selective, full, block}, and
  torchtitan's op (the last stage
  recomputes too unless `last_stage_recomputes` is false: PHAZE's rule), interleave v (virtual
  stages per device, interleaved 1F1B; with more than one stage each holds at least v layers),
  distributed optimizer (optimizer state sharded over the d replicas, ZeRO-1), DP-gradient overlap,
  and the HBM bandwidth that times the optimizer step.
  A stage's own mode is r, or none for the last stage under PHAZE's rule.
* Stage load per microbatch. compute = forward critical path F + backward critical path B of the
  stage's layers (longest path of latencies through the stage's own edges), plus the recompute time
  R: F under full recompute, the sum of the layers' attention-core forward latencies under
  selective, the sum of the latencies of the forward ops op recompute runs again under op, the sum of
  the forward latencies of the stage's first N v transformer blocks (N = `recompute_layers`, in layer
  order) under block, 0 under none. The tensors crossing the cut after a stage are sent forward by it and
  their gradients received back by it; tensors of earlier stages needed further down are relayed
  across the cut too, and a layer sends each tensor once per cut (its largest edge into the later
  stages counts). load = compute + 2 v transfer(cut bytes / u) (each of the v model chunks of a stage
  sends and receives), transfer(b) = b / bandwidth + latency (0 when b = 0), u the stage's devices
  under sequence parallelism (each sends a t-th, as Megatron-Core's pipeline tensor is s / (cp t)
  tokens long), else 1. With `overlap_p2p_comm` under interleaving (v > 1) each model chunk's
  transfers run beside the next chunk's pass, so load = compute + max(0, 2 v transfer(...) - compute)
  + gathers = max(compute, sends) + gathers (Megatron-Core's interleaved schedule; its 1F1B, v = 1,
  blocks on each send); the lower bound then counts no sends. That load falls as a pass grows while
  the sends outlast the computation (a longer pass hides more of ZeRO-3's gathers), so with
  `bound_sync_windows` it is max(compute + gathers, sends + h G) instead, G ZeRO-3's collectives and
  h `collective_share`: never above the real load at longer latencies, never falling. Every pipeline
  transfer uses the tier of a whole replica's devices, the slowest over the d replicas (1F1B runs
  them in lockstep). This is conservative for two neighbouring stages inside one node of a larger
  pipeline: a downset DP knows where a stage sits but not which layers the next stage holds.
* Time per batch = max stage load * (m + (s - 1) / v) + the largest, over stages, of the stage's
  exposed DP sync + its optimizer step (each stage syncs and steps its own weights on its own
  devices after the flush; the last to finish ends the iteration), where the bubble (s - 1) / v of
  a stage's work is interleaved 1F1B's (1F1B's for v = 1). Under ZB-H1 (`pipeline_schedule`, v = 1)
  the pipeline's part is instead L m + (s - 1) max(0, L - 2 W), L the max stage load and W the least
  over stages of a stage's weight-gradient time (the critical path of its layers' weight-gradient
  latencies, part of B; capped at (min(F, B - W) + W) / 2, so that a slot is never shorter than its
  forward or input-gradient work): each of 1F1B's s - 1 bubble slots is shortened by W deferred
  twice, in the warm-up and in the cool-down, credited at the least W of any stage (Qi et al.'s
  (p - 1)(F + B - W) for uniform stages, never below any stage's own). The time then also falls as
  the least W grows: the DP also keeps, per set of stages, the plans no other beats on it; its bounds
  multiply a load by m + (s - 1) max(0, 1 - 2 w), w the largest weight-gradient share W / (F + B) of
  a layer (a stage's W, capped or not, is at most w times its load); `bound_sync_windows` takes ZB-H1's
  bubble as 0.
  A stage's DP sync is the ring all-reduce
  of its gradients over its d replicas: 2 (d-1)/d * param bytes / bandwidth + 2 (d-1) latency. Every
  stage's DP group is taken to sit as the first stage's does: on the tier holding ids 0 .. (d-1) k +
  width - 1, the first stage's width for it and t (at most k) for the later stages (conservative
  for a later stage without tensor-parallel layers). When that group spans several groups of the tier below
  (nodes), each node holds some members of each of the width DP groups (device j of every replica's
  first stage, ids r k + j), each member with a link of its own (a DGX has a NIC per GPU), and the
  hierarchical all-reduce drives them all: the bandwidth is the fewest members a node holds of any
  DP group that spans several nodes (rails; lower group size / k when k divides it, d mod that in a
  last, partial node; 1 when k is at least the lower group size; counted exactly otherwise) times
  the tier's per device, at most the tier below's. Each sync starts after the flush (conservative
  for a later stage, whose own flush ends earlier, by the drain behind it) and is exposed whole,
  as PHAZE's formula has it, except that with `overlap_grad_reduce` every stage's reduction hides
  behind W = c B, B the first stage's backward pass (exposed = max(h sync, sync - W); a later stage's
  own flush ends earlier: conservative). Without interleaving c = 1: the reduction runs beside the
  last backward pass. Interleaved, Megatron-Core syncs each of the v model chunks when its last
  backward pass ends (`grad_sync_func`), and the backward passes run chunk by chunk in groups of
  g = min(s, m) microbatches, so the reductions of all chunks but the last hide behind (v - 1) g
  passes of B / v: c = (v - 1) g / v; the last chunk's, sync / v, is left, so h is at least 1 / v.
  A distributed optimizer's reduce-scatter R plus all-gather G moves the same bytes as the all-reduce,
  half each (R = G = sync/2): the reduce-scatter hides as the reduction above (max(h R, R - W)), the
  all-gather behind c F, F the first stage's forward pass, with `overlap_param_gather` (max(h G,
  G - c F); interleaved, each chunk's gather runs before its first forward pass,
  `param_sync_func`, and the first chunk's is left), else it is exposed. Here h is
  `collective_share`, the share of the cores a collective's kernels hold while it runs beside
  computation, which runs on the rest: a window of W seconds and a collective of C take
  max(W + h C, C), so the collective adds max(h C, C - W) (max(0, C - W) at h = 0); interleaved, h
  is at least 1 / v. ZeRO-3's gathers and reduce-scatters hide behind the passes the same way
  (their h is `collective_share`). Without these switches the time only grows with every layer
  latency (the `bounded` search's dominance rests on it). With them a longer pass hides more, so the
  time can fall as a latency grows; `bound_sync_windows` (the `bounded` search's lower bound)
  instead opens each window that can open as long as the bottleneck load X allows (B, F and B + F
  are at most X): W = c X, and when a distributed optimizer's two both open they share c X in
  whichever split ends the sync soonest (max(h S, S - c X) exposed; with experts each end term at its
  best split: with fp32 gradients R and G differ, and c X / 2 each would be above the real time).
  That time is never above the real one, and never falls as X grows (X times the slots, at least
  c, grows as fast as any window: c < g <= m). A stage's exposed sync + step
  grows with its weights, so the DP keeps, per set of stages, the plans no other beats on both the
  largest load and the largest weights.
  Expert gradients (MoE). A layer's routed experts' bytes X of its weights P' (`expert_param_bytes`,
  whole at every t) are reduced over the expert-data-parallel group, t d cp / ep devices
  (Megatron-Core's, expert tensor parallelism 1), after the dense P' - X over the d cp data-parallel
  ones: sync = ring(P' - X, d cp) + ring(X, t d cp / ep) (none of the second without experts, nothing
  where ep = t d cp). Megatron-Core orders a stage's ranks tp, cp, dp and its expert ranks ep, then
  expert-data-parallel, so the expert-data-parallel group is every ep-th of the stage's t cp d ranks:
  where t cp divides ep, the same device of every (ep / (t cp))-th replica, on the tier (and rails) of
  t d cp / ep replicas k ep / (t cp) ids apart; otherwise the dense group's tier. With experts a
  stage's exposed sync + step depends on its dense and its expert bytes apart, not on its weights
  alone. Its end after the flush, sync S and step P, is then written as the same sum's maximum of
  terms: max(h S + P, S + P - W), or max(h S + P, (R + h G) + P - W, (G + h R) + P - F,
  S + P - W - F) with a distributed optimizer. Each term grows with one of h S + P,
  (R + h G) + P, (G + h R) + P and S + P, so the latest end of several stages is that of their
  maxima, bit for bit. The DP then keeps, per set of stages, per d and per tiers of a
  later stage's syncs, the plans no other beats on the largest load and the four maxima. (Without
  experts the end stays the sum, to the bit as before.)
  fp32 gradients (`grad_reduce_in_fp32`, Megatron-LM's under `--bf16`): the reduction moves twice
  the weights' bytes (the all-reduce of 2 P', a distributed optimizer's reduce-scatter R half of it,
  its all-gather G of the bf16 weights half the all-reduce of P'; ZeRO-3's reduce-scatters likewise),
  the gradients take 4 bytes a parameter in memory, and the optimizer step zeroes and reads twice
  their bytes.
  A stage's optimizer step zeroes every gradient for the next iteration, reads its shard
  of the gradients and reads and writes its shard of the weights and its optimizer state: (P' + 3
  shard + 2 state) bytes / HBM bandwidth, P' = the stage's weight (= gradient) bytes, shard =
  ceil(P' / d) with a distributed optimizer (each replica updates only its 1/d; the routed experts'
  ceil(X / (t d cp / ep)) + ceil((P' - X) / d cp)), P' otherwise, where
  it is twice the parameter memory (0 when the bandwidth is given as 0: the step is not timed, as in
  PHAZE).
* Memory per device of the stage at position q from the end (of s stages) = weights 2P +
  gradients 2P (4P in fp32; plus its largest layer's dummy weight gradients under
  `gradient_accumulation_fusion`) + optimizer state (0 for SGD, 6 * 2P for mixed-precision Adam: 12 bytes per
  parameter, divided over the d replicas rounding up with a distributed optimizer, the routed experts'
  over the t d cp / ep of the expert-data-parallel group, as are the gradients from ZeRO-2 and the
  weights from ZeRO-3; P = the stage's
  bytes of 2-byte weights / 2) + ceil(kept * u / v) + working, where u is the number of model-chunk
  microbatches in flight on it (q for v = 1; 2 (q - 1) + (v - 1) s + 1 for v > 1, Megatron's
  interleaved warm-up plus one; never more than the m v model-chunk microbatches of a replica, as
  Megatron's warm-up stops at the microbatches there are) and, summing/maximising over the stage's layers:
  none: kept = stash bytes, working = 0; selective: kept = selective stash bytes (the attention core
  dropped), working = max(stash - selective stash) (one layer's attention core rebuilt);
  full: kept = input bytes (each layer's input), working = max activation bytes (one layer's full
  activations rebuilt); op: kept = op stash bytes (`phazec.passes.memory.op_checkpoint`), working =
  max(stash - op stash); block: kept = the input bytes of the blocks it reruns and the stash bytes
  of every other layer, working = the largest activation bytes of those blocks. A plan fits when every
  stage fits in HBM.

The model is implemented once, in C++ (`ext/src/placement.cpp`; the settings of a plan it reads are
declared once, in `PHAZEC_PLAN_SETTINGS` of `ext/include/phazec/placement.hpp`, and reach it by name):
`dp.solve_placements` searches it and `evaluate.evaluate_plan` times one plan with the same functions,
so the DP's optimum and the evaluation of its plan agree bit for bit. Here: the problem and its checks
(`problem`), the DP (`dp`), one plan's figures (`evaluate`) and Megatron's stages (`megatron`).
"""
