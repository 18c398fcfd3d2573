// Local attention (sliding windows, chunks) as a layer's kernels, Gemma's extra norms and
// logit soft-capping, and a task graph whose layers alternate between local and full attention.
#include <catch2/catch.hpp>

#include <string>

#include "models.hpp"

namespace fleetsim {
namespace {

using testing::llama3_8b;

const Op& op_named(const std::vector<Op>& ops, const std::string& name) {
  for (const Op& op : ops) {
    if (op.name == name) return op;
  }
  FAIL("no op " << name);
  return ops.front();
}

ModelSpec windowed(int window, LocalAttention kind, int full_every) {
  ModelSpec m = llama3_8b();
  m.attention_window = window;
  m.local_attention = kind;
  m.full_attention_every = full_every;
  return m;
}

}  // namespace

TEST_CASE("local attention's query-key pairs: a sliding window's band, chunks' triangles") {
  // s = 8,192. Causal: s^2 / 2 = 33,554,432 pairs. A sliding window of 4,096: the first 4,096
  // queries meet 1..4,096 keys, the rest 4,096 each, as a continuous band w s - w^2 / 2 =
  // 33,554,432 - 8,388,608 = 25,165,824 (3/4 of causal). Chunks of 2,048: four causal
  // triangles of 2,048^2 / 2 = 8,388,608 (1/4). Chunks of 3,000: two of 3,000^2 / 2 and the
  // remainder's 2,192^2 / 2: 9,000,000 + 2,402,432. A window as long as the sequence: causal.
  const double s = 8192;
  CHECK(local_attention_pairs(windowed(4096, LocalAttention::sliding, 0), s) == 25'165'824.0);
  CHECK(local_attention_pairs(windowed(2048, LocalAttention::chunked, 0), s) == 8'388'608.0);
  CHECK(local_attention_pairs(windowed(3000, LocalAttention::chunked, 0), s) == 11'402'432.0);
  CHECK(local_attention_pairs(windowed(8192, LocalAttention::sliding, 0), s) == s * s / 2);
  CHECK(local_attention_pairs(windowed(16384, LocalAttention::chunked, 0), s) == s * s / 2);
  // On average a query meets w - w^2 / (2 s) keys: 3,072 of a window of 4,096.
  CHECK(mean_causal_keys(s, 4096) == 3072.0);
  CHECK(mean_causal_keys(s, 0) == 4096.0);
}

TEST_CASE("a layer attending locally changes its attention kernels and nothing else") {
  // Llama 3 8B on tp 2, 8,192 tokens: a sliding window of 1,024 does w s - w^2 / 2 pairs, so
  // 4 x pairs x 4,096 / 2 FLOPs forward and 2.5x that backward; chunks of 1,024 are causal
  // passes over 1,024 keys. Every other op is the full layer's.
  const TrainingSpec t = testing::training(8192, 8, 1);
  for (const LocalAttention kind : {LocalAttention::sliding, LocalAttention::chunked}) {
    CAPTURE(kind == LocalAttention::sliding);
    const ModelSpec m = windowed(1024, kind, 2);
    const LayerOps full = decoder_layer_ops(m, t, 2, Recompute::none, 1, 1, true, {}, false);
    const LayerOps local = decoder_layer_ops(m, t, 2, Recompute::none, 1, 1, true, {}, true);
    const double pairs = local_attention_pairs(m, 8192);
    const Op& attention = op_named(local.forward, "attention");
    CHECK(attention.kernel.flops == Approx(4.0 * pairs * 4096 / 2));
    CHECK(attention.model_flops == attention.kernel.flops);
    CHECK(op_named(local.backward, "attention.bwd").kernel.flops ==
          Approx(2.5 * attention.kernel.flops));
    CHECK(op_named(full.forward, "attention").kernel.flops == Approx(2.0 * 8192.0 * 8192 * 2048));
    if (kind == LocalAttention::sliding) {
      CHECK(attention.kernel.window == 1024);
      CHECK(attention.kernel.seq == 8192);
    } else {
      CHECK(attention.kernel.window == 0);
      CHECK(attention.kernel.seq == 1024);
    }
    REQUIRE(local.forward.size() == full.forward.size());
    REQUIRE(local.backward.size() == full.backward.size());
    for (std::size_t i = 0; i < full.forward.size(); ++i) {
      if (full.forward[i].name == "attention") continue;
      CHECK(local.forward[i].kernel == full.forward[i].kernel);
    }
  }
}

TEST_CASE("every N-th layer attends fully: the step's attention FLOPs are the layers' sum") {
  // 32 layers, every 4th full (layers 3, 7, ...): 8 full and 24 local layers, so the step's
  // hardware FLOPs are the all-full step's less 24 layers' difference between the two
  // attentions, and lie between an all-full and an all-local model's.
  const TrainingSpec t = testing::training(8192, 8, 1);
  const ParallelPlan plan = testing::pipeline(2, 4);
  const auto step_flops = [&](const ModelSpec& m) {
    return build_data_parallel_step(m, t, plan).hardware_flops_per_rank;
  };
  const ModelSpec mixed = windowed(1024, LocalAttention::sliding, 4);
  CHECK(mixed.attends_locally(0));
  CHECK_FALSE(mixed.attends_locally(3));
  CHECK(mixed.attends_locally(4));
  const double full_layer =
      op_named(decoder_layer_ops(mixed, t, 1, Recompute::none, 1, 1, true, {}, false).forward,
               "attention")
          .kernel.flops;
  const double local_layer =
      op_named(decoder_layer_ops(mixed, t, 1, Recompute::none, 1, 1, true, {}, true).forward,
               "attention")
          .kernel.flops;
  const double all_full = step_flops(llama3_8b());
  const double all_local = step_flops(windowed(1024, LocalAttention::sliding, 0));
  // Per rank, the mean of the two stages' programs (16 layers each): 2 micro-batches a replica,
  // forward (1) and backward (2.5) of each, over the 2 stages.
  const double saved_per_layer = (full_layer - local_layer) * 3.5 * 2 / 2;
  CHECK(step_flops(mixed) == Approx(all_full - 24 * saved_per_layer));
  CHECK(all_local == Approx(all_full - 32 * saved_per_layer));
  // A window as long as the sequence is full attention.
  CHECK(step_flops(windowed(8192, LocalAttention::sliding, 0)) == Approx(all_full));
}

TEST_CASE("a window that no layer uses, or one as long as the sequence, is full attention") {
  // Every layer attending fully (full_attention_every 1), or a window of the whole sequence:
  // no layer attends locally, so context parallelism runs as with full attention.
  const TrainingSpec t = testing::training(8192, 8, 1);
  ParallelPlan plan = testing::pipeline(1, 4);
  plan.cp = 2;
  for (const ModelSpec& m :
       {windowed(1024, LocalAttention::sliding, 1), windowed(8192, LocalAttention::chunked, 2)}) {
    CHECK_FALSE(m.has_local_layers(8192));
    CHECK_FALSE(job_subject(m, t).local_attention);
    CHECK(build_data_parallel_step(m, t, plan).hardware_flops_per_rank ==
          Approx(build_data_parallel_step(llama3_8b(), t, plan).hardware_flops_per_rank));
  }
  CHECK(job_subject(windowed(1024, LocalAttention::sliding, 2), t).local_attention);
}

TEST_CASE("Gemma's norms after each block and its soft-capped logits are kernels of their own") {
  // post_norms adds a norm of the block's output before each residual add (two a layer, with
  // two hidden-sized weights); logit_softcap one elementwise pass over the logits each way.
  ModelSpec m = llama3_8b();
  const TrainingSpec t = testing::training(4096, 8, 1);
  const LayerOps plain = decoder_layer_ops(m, t);
  const double parameters = decoder_layer_parameters(m);
  m.post_norms = true;
  const LayerOps gemma = decoder_layer_ops(m, t);
  CHECK(gemma.forward.size() == plain.forward.size() + 2);
  CHECK(op_named(gemma.forward, "attn_post_norm").kernel.bytes == 2.0 * 2 * 4096 * 4096);
  CHECK(op_named(gemma.backward, "mlp_post_norm.bwd").kernel.bytes == 4.0 * 2 * 4096 * 4096);
  CHECK(decoder_layer_parameters(m) == parameters + 2 * 4096);
  // Each post-norm's backward reads its input, the block's output: 2 x 2 bytes x hidden more a
  // token, split by tp under sequence parallelism.
  ModelSpec plain_model = m;
  plain_model.post_norms = false;
  CHECK(decoder_layer_saved_bytes_per_token(m, t) ==
        Approx(decoder_layer_saved_bytes_per_token(plain_model, t) + 2 * 2 * 4096));
  CHECK(decoder_layer_saved_bytes_per_token(m, t, Recompute::none, 4) ==
        Approx(decoder_layer_saved_bytes_per_token(plain_model, t, Recompute::none, 4) +
               2 * 2 * 4096 / 4.0));
  m.logit_softcap = true;
  const LayerOps head = head_ops(m, 1, 4096);
  const double logits = 4096.0 * 128256;
  CHECK(op_named(head.forward, "logit_softcap").kernel.bytes == 2 * 2 * logits);
  CHECK(op_named(head.backward, "logit_softcap.bwd").kernel.bytes == 3 * 2 * logits);
}

}  // namespace fleetsim
