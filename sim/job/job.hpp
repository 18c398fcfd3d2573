// Long training runs under interruptions: a Monte Carlo of the wall time to train, with
// checkpoints.
//
// A run is a number of optimizer steps, simulated as segments, not steps: train for the
// checkpoint interval, then checkpoint. A step takes the step executor's time for the cluster's
// state (healthy, one replica short, with degraded hardware), stretched by jitter to the
// slowest rank's. A blocking checkpoint stops training while it is written; an asynchronous
// one only while it is copied to host memory, and is written from there while training goes on
// (the next one waits for that write); an in-memory one goes from host memory to a peer node,
// and to storage every so often. A checkpoint counts once written.
// Interruptions arrive as a Poisson process over wall-clock time at the cluster's total rate,
// the sum over causes of their rate per GPU-day times the GPUs. One costs the work since the
// last written checkpoint (one being copied or written is lost too), then a downtime:
// detection, restart and reading the checkpoint back; an interruption during the downtime
// starts it over. Causes that take nodes out of service (hardware; a switch's nodes at once)
// also leave them out for the node repair time: the job restarts on hot spares when enough are
// free, else waits for repairs or restarts without the replicas the nodes belonged to. Spot
// capacity is taken back with a notice (at a rate, or the times of a trace); degraded
// hardware slows every step until evicted. The run ends when its last checkpoint is written.
//
// For this process the expected wall time has a closed form (J. T. Daly, "A higher order
// estimate of the optimum checkpoint interval for restart dumps", Future Generation Computer
// Systems 22 (2006) 303-312): a segment of tau seconds of training and a delta-second
// checkpoint, with interruptions every M seconds on average and a downtime R, takes on average
//     M e^(R/M) (e^((tau + delta)/M) - 1),
// which a test holds the simulation to. Young's interval sqrt(2 delta M), and Daly's higher-order
// one, minimise the waste.
//
// Each replication draws its interruptions from its own seeded stream (the run's seed and the
// replication's index): results are the same on any number of threads, and policies compared
// under one seed see the same interruption histories (common random numbers), so their
// difference is not noise. A replication runs on the engine's integer time (SimTime): the
// job's durations and each arrival are rounded to the nanosecond once, and every instant is
// exact from then on.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "sim/engine/errors.hpp"
#include "topology/node_spec.hpp"
#include "workloads/model_spec.hpp"

namespace fleetsim {

struct InterruptionCause {
  std::string name;
  double per_gpu_day = 0;  // interruptions per GPU per day
  std::string source;      // where the rate comes from; "assumed: ..." when nothing published
  // The nodes one interruption takes out of service until repaired: 1 for a GPU, host or link
  // fault, those under a switch for the switch's (correlated failures), 0 where the job
  // restarts on the same nodes (a software bug, a timeout).
  int nodes_out = 1;
  // One standard deviation of per_gpu_day: a rate counted from `count` interruptions is known to
  // within rate / sqrt(count) (Poisson); 0 where nothing says (a rate written in the scenario).
  double per_gpu_day_sigma = 0;
  bool operator==(const InterruptionCause&) const = default;
};

// Degraded hardware that keeps running: a GPU computing slower (thermal throttling, a failing
// part) or a NIC link down to part of its bandwidth (a flapping or degraded cable). One slows
// every synchronous step: the slowest rank gates the data-parallel reduction and the slowest
// stage the pipeline, and NCCL splits a collective evenly over its channels, so the slowest
// channel's rail gates it. Its step time is the step executor's with every GPU (or every NIC)
// so degraded, which is what that gating amounts to. Degradations appear as a Poisson process
// and stay until evicted: when the job evicts them, at the first checkpoint that long after
// one appeared (evict_degraded_after_s) it restarts without the degraded nodes (taken out for
// repair like a failed one).
struct Degradation {
  enum class Kind { compute, network };
  std::string name;
  Kind kind = Kind::compute;
  double fraction = 0;     // compute: kernels that much slower; network: the bandwidth lost
  double per_gpu_day = 0;  // onsets per GPU per day
  std::string source;
  bool operator==(const Degradation&) const = default;
};

// A kind of degraded hardware in a job, and a step with one present (jitter included).
struct DegradedStep {
  Degradation degradation;
  double step_s = 0;
  bool operator==(const DegradedStep&) const = default;
};

// What a job short of healthy nodes (more out for repair than spares) does.
enum class ShortagePolicy {
  wait,    // for the repairs, then restart at full size
  shrink,  // restart at once without the data-parallel replicas the nodes belonged to; after a
           // checkpoint, restart with them again once they are repaired
};

enum class CheckpointWrite {
  blocking,  // training stops until the checkpoint is on storage
  async,     // training stops for the copy to host memory; the write to storage drains behind
  // Training stops for the copy to host memory; each node's share then goes to a peer node's
  // host memory over the NICs, behind training, and every `persist_every_s` of training (and at
  // the end) to storage too, from host memory. A restart reads the peers' copy back, unless the
  // interruption took out more than one node (a peer may be among them: assumed lost), when it
  // falls back to the last copy on storage.
  in_memory,
};
std::string to_string(CheckpointWrite write);  // "blocking", "async", "in_memory"

struct CheckpointPolicy {
  enum class Kind { every_steps, every_seconds, young_daly };
  Kind kind = Kind::young_daly;
  double value = 0;  // steps, or seconds of training, between checkpoints (every_*)
  bool operator==(const CheckpointPolicy&) const = default;
};

// Spot capacity: nodes taken back with a notice. Within the notice the job finishes the step in
// progress and writes an emergency checkpoint when both fit, losing no work; otherwise it stops
// at the notice and loses the work since its last checkpoint. Either way it waits for capacity
// to return, then restarts and reads its checkpoint back (interruptions can start that over;
// nothing is preempted or interrupted while the job holds no capacity).
struct SpotCapacity {
  double preemptions_per_node_hour = 0;
  std::string source;  // "assumed: ..." where nothing is published (H100-class spot)
  double notice_s = 0;
  double capacity_return_s = 0;
  // A trace instead of a rate: the seconds from the job's start at which one of its nodes was
  // preempted, ascending, replayed alike in every replication (none after the last).
  std::vector<double> trace_s = {};
  bool operator==(const SpotCapacity&) const = default;
};

struct JobSpec {
  double steps = 0;          // optimizer steps to train
  double step_s = 0;         // one step on the healthy cluster, jitter included
  double jitter_factor = 1;  // what jitter made of the replayed step (all step times include it)
  int gpus = 0;
  int nodes = 1;  // the job's nodes: what preemptions, repairs, spares and peers count in
  double checkpoint_write_s = 0;  // a checkpoint's write to storage
  CheckpointWrite write = CheckpointWrite::blocking;
  double checkpoint_copy_s = 0;  // async, in_memory: the device-to-host copy training stops for
  double peer_copy_s = 0;        // in_memory: a node's share to its peer's host memory
  double peer_restore_s = 0;     // in_memory: reading it back
  double persist_every_s = 0;    // in_memory: training between writes to storage
  double restore_s = 0;          // reading the last checkpoint back after a restart
  double detection_s = 0;        // from an interruption to the job's being declared failed
  double restart_s = 0;          // rescheduling and relaunching the job
  std::vector<InterruptionCause> causes;
  CheckpointPolicy policy;
  std::optional<SpotCapacity> spot;
  double node_repair_s = 0;  // a node taken out by an interruption is back after this
  int hot_spares = 0;        // idle nodes, paid for, that replace a node taken out at once
  ShortagePolicy when_short = ShortagePolicy::wait;
  int replicas = 1;  // data-parallel replicas (dp), what shrinking drops
  // A step one replica short, its tokens that much fewer (0: as long as a full step).
  double shrunk_step_s = 0;
  std::vector<DegradedStep> degradations;
  std::optional<double> evict_degraded_after_s;  // none: degraded nodes are kept
  double tokens_per_step = 0;
  double usd_per_gpu_hour = 0;  // paid for every GPU, spares' too, over the wall time
  bool operator==(const JobSpec&) const = default;
};

// The mean of the largest of n independent standard normal draws: 0 for one, 1/sqrt(pi) for
// two, about sqrt(2 ln n) for many.
double expected_max_of_normals(int n);
// What jitter makes of a synchronous step: every rank's time varies with the coefficient of
// variation `cv`, and the step waits for the slowest of `ranks`, so it takes on average
// 1 + cv x expected_max_of_normals(ranks) of the replayed step.
double synchronous_jitter_factor(double cv, int ranks);

// The GPUs paid for over the run's wall time: the job's and its hot spares'.
double paid_gpus(const JobSpec& job);
// What a run of `wall_s` costs: every paid GPU at the job's price over the wall time.
double run_cost_usd(const JobSpec& job, double wall_s);
// How long training stands still for one checkpoint (blocking: the write; async and in memory:
// the copy to host memory).
double checkpoint_stall_s(const JobSpec& job);

// The cluster's interruptions per second: every cause's rate over all its GPUs.
double interruptions_per_second(const JobSpec& job);
// Training time between checkpoints that minimises the expected waste, for a checkpoint of
// `checkpoint_s` and a mean time between interruptions `mtbf_s`: Daly's higher-order estimate
// sqrt(2 delta M) (1 + sqrt(delta / 2M) / 3 + delta / 18M) - delta for delta < 2M, else M.
double young_daly_interval_s(double checkpoint_s, double mtbf_s);
// Steps per segment under the job's policy (at least one, at most the run's; under Young-Daly
// the run's steps when nothing fails).
double checkpoint_interval_steps(const JobSpec& job);
// Daly's expected wall time of the job, segment by segment (the last one may be shorter). Its
// process has blocking checkpoints and no waits for nodes or capacity; throws ModelError for
// another.
double daly_expected_wall_s(const JobSpec& job);

struct JobReplication {
  double wall_s = 0;
  std::int64_t interruptions = 0;
  std::int64_t preemptions = 0;            // of spot capacity, while the job ran
  std::int64_t checkpoints = 0;            // written, emergency ones included
  std::int64_t emergency_checkpoints = 0;  // written within a spot notice
  std::int64_t memory_lost = 0;            // in_memory: restarts from storage, the peers' copy lost
  double lost_training_s = 0;     // training redone: the work interruptions and preemptions lost
  double checkpoint_stall_s = 0;  // training stood still for scheduled checkpoints
  double node_wait_s = 0;         // the job waited for a repaired node
  double shrunk_s = 0;            // trained short of replicas
  std::int64_t regrows = 0;       // restarts to take repaired replicas back
  double degraded_s = 0;          // trained with degraded hardware present
  std::int64_t evictions = 0;     // degraded nodes evicted
  bool operator==(const JobReplication&) const = default;
};

// Mean with its 99% confidence half-width (normal approximation), and percentiles.
struct SampleSummary {
  double mean = 0;
  double ci99_half_width = 0;
  double p50 = 0;
  double p90 = 0;
  double p99 = 0;
  bool operator==(const SampleSummary&) const = default;
};
SampleSummary summarise(std::vector<double> samples);

struct JobResult {
  double interval_steps = 0;
  double mtbf_s = 0;    // the cluster's mean time between interruptions (infinite: none)
  double useful_s = 0;  // training time the run needs without interruptions or checkpoints
  std::vector<JobReplication> replications;
  SampleSummary wall_s;
  SampleSummary goodput;  // useful training time / wall time
  SampleSummary interruptions;
  SampleSummary preemptions;
  SampleSummary lost_gpu_hours;  // GPU-hours paid for and not spent on useful training
  SampleSummary node_wait_s;
  SampleSummary shrunk_s;
  SampleSummary regrows;
  SampleSummary degraded_s;
  SampleSummary evictions;
  SampleSummary memory_lost;  // in memory: restarts from storage
  SampleSummary cost_usd;
  SampleSummary usd_per_million_tokens;  // empty without tokens_per_step
  // The job's GPU-time that scheduled checkpoints stood training still (those an interruption
  // cut short too), priced, over the scheduled checkpoints written: what one that counts costs.
  SampleSummary usd_per_checkpoint;
  bool operator==(const JobResult&) const = default;
};

// A well-formed run that cannot finish as the model plays it: interruptions that would cut
// nearly every segment, downtime or write short, a wait that outlasts what is simulated, a run
// past its horizon. An answer about that run (reported beside its step), not a mistake in the
// scenario: the loader refuses those.
class RunCannotFinish : public ModelError {
 public:
  using ModelError::ModelError;
};

// Throws ModelError on a job that cannot run (no steps, a step or checkpoint time that is not
// positive where needed, a negative rate, spares without a repair time, in-memory checkpoints
// on one node or on spot), and RunCannotFinish on one that would practically never end: a
// segment, downtime or write that interruptions would cut short more than e^10 times on
// average, a training or a replication past its horizon.
// `replication_done`, if given, is called once per finished replication, from any thread.
// When a stop is requested (sim/engine/stop.hpp) no further replication starts, and Stopped is
// thrown; with `on_stop` keep_finished the result has instead the first k < `replications`
// that finished (what those k replications alone give), Stopped only when k is 0.
enum class OnStop { throw_stopped, keep_finished };
JobResult simulate_job(const JobSpec& job, int replications, std::uint64_t seed,
                       const std::function<void()>& replication_done = {},
                       OnStop on_stop = OnStop::throw_stopped);

// A training run as a scenario describes it (its run: block, training.tokens, cluster.storage
// and pricing): what turns a simulated step into a job.
struct RunSpec {
  double tokens = 0;          // to train
  std::string interruptions;  // the preset the causes come from, or "listed"
  std::vector<InterruptionCause> causes;
  CheckpointPolicy policy;
  double detection_s = 0;
  double restart_s = 0;
  int replications = 1000;
  double step_jitter = 0;  // coefficient of variation of one rank's step time
  CheckpointWrite write = CheckpointWrite::blocking;
  double persist_every_s = 0;  // in_memory: training between writes to storage
  double node_repair_s = 0;
  int hot_spares = 0;
  ShortagePolicy when_short = ShortagePolicy::wait;
  std::vector<Degradation> degradations;
  std::optional<double> evict_degraded_after_s;
  double storage_write_bytes_per_s = 0;  // the checkpoint storage's aggregate rates
  double storage_read_bytes_per_s = 0;
  std::optional<SpotCapacity> spot;  // set: the run is on spot capacity
  double usd_per_gpu_hour = 0;       // on-demand
  double spot_usd_per_gpu_hour = 0;
  bool priced = false;       // a price was given (zero is a price: hardware already paid for)
  bool spot_priced = false;  // a spot price was given
  bool operator==(const RunSpec&) const = default;
};

// A checkpoint's write to storage, and a restart's read of what it restores, in seconds: at
// the storage's rates, or the nodes' NICs where they are slower.
struct CheckpointTimes {
  double write_s = 0;
  double restore_s = 0;
};
CheckpointTimes checkpoint_times(const RunSpec& run, const ModelSpec& model,
                                 const TrainingSpec& training, const ParallelPlan& plan,
                                 const NodeSpec& node, int nodes);

// A checkpoint's bytes, written once for the whole model across the data-parallel replicas:
// per trained parameter its BF16 weight, FP32 master weight and the optimizer's moments (14
// bytes with Adam's FP32 moments, about 8 with 8-bit Adam's); where the FP32 master is the
// parameter (PyTorch's FSDP: its state dict holds the FP32 shards), no BF16 weight (12). Under
// a low-rank method (LoRA, QLoRA, DoRA) only the adapters (and DoRA's magnitudes) train, and
// only they are checkpointed.
double checkpoint_bytes(const ModelSpec& model, const TrainingSpec& training,
                        const ParallelPlan& plan);
// What a restart reads: the checkpoint, and under a low-rank method the frozen base's BF16
// weights too (QLoRA and QDoRA quantize them again as they load them).
double restore_bytes(const ModelSpec& model, const TrainingSpec& training,
                     const ParallelPlan& plan);
// The rate a checkpoint moves at: the storage's, unless the nodes' NICs, every node writing
// its share at once, are slower.
double checkpoint_bytes_per_s(double storage_bytes_per_s, const NodeSpec& node, int nodes);
// The steps a run's job takes, as the step executor replays them, jitter not included.
struct RunStepTimes {
  double healthy_s = 0;
  // One data-parallel replica short, for a run that shrinks: nothing where the layout cannot
  // run so (the job then waits for repairs), 0 where a replica is not whole nodes (taken as a
  // full step).
  std::optional<double> shrunk_s = {};
  std::vector<double> degraded_s = {};  // one per kind of degraded hardware, in the run's order
  bool operator==(const RunStepTimes&) const = default;
};

// Why a run on `nodes` of `node` cannot keep in-memory checkpoints, or nothing: they go to a
// peer node's memory over the compute NICs, on capacity that is not taken back (spot capacity
// reclaimed takes the peers' copies with it). The loader reports it at the scenario's key;
// job_spec refuses it.
std::optional<std::string> in_memory_checkpoint_problem(bool spot, int nodes, const NodeSpec& node);

// The optimizer steps that train `tokens`: a part step counts whole.
double training_steps(double tokens, const TrainingSpec& training);

// The job of a run whose steps take `steps`: its steps (training_steps),
// GPUs, checkpoint write, copy and read times, and the run's rates, policy, spot capacity, node
// repair, spares and price (on spot, the spot price where one is given); every step time with
// the run's jitter (synchronous_jitter_factor over the GPUs). An asynchronous checkpoint is
// copied by every GPU at once, each its share (a fully parallel save), over its PCIe link.
// Throws ModelError unless `steps` has one degraded step per kind of degraded hardware the run
// has.
JobSpec job_spec(const RunSpec& run, const ModelSpec& model, const TrainingSpec& training,
                 const ParallelPlan& plan, const NodeSpec& node, int nodes,
                 const RunStepTimes& steps);

}  // namespace fleetsim
