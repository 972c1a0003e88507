// hpcnn train: the pipeline (inter-layer) schedule of dist-train: P stages of a model
// (nn/pipeline.h) on P x D ranks, stage-major (rank = stage x D + replica: ranks 0..D-1 run stage
// 0), each replica's batch cut into m micro-batches (m >= P) that flow through the stages
// (GPipe, Huang et al., NeurIPS 2019, Sec. 2; AxoNN, Singh & Bhatele, IPDPS 2023, Sec. III).
//
// Orders (pipeline_order):
//   gpipe  all m forwards (0..m-1), then all m backwards (m-1..0): m micro-batches in flight.
//   1f1b   PipeDream-flush (Narayanan et al., SC 2021, Sec. 2.2): stage s runs min(P-1-s, m)
//          warm-up forwards, then alternates one forward and one backward, then the remaining
//          backwards (0..m-1): at most P - s micro-batches in flight. Same gradients as gpipe (the
//          sum over the micro-batches is taken in another order: equal to float rounding).
// Messages: one per micro-batch and direction between the same replica of neighbouring stages
// (rank +- D), the crossing values of the cut packed in their fixed order ([mb, ...] each, fp32),
// by MPI_Isend / MPI_Irecv with tag 2j (activations of micro-batch j) or 2j + 1 (their gradients).
// Receives are posted one operation ahead; sends are waited for at the end of the step.
// Masked messages (set_kept_channels; parallel.pipeline_masked_channels): a crossing value
// [mb, C, ...] of a channel-masked model travels as its kept channels only ([mb, K, ...], the
// channels in ascending order), forward and backward; the receiver fills the others with 0. The
// sender checks that the channels it leaves out of an activation are exactly 0 (ErrorKind::bad_input
// naming the value, the channel and the micro-batch otherwise); their gradients are left out
// unchecked, which is exact while the parameters that hold them at zero stay 0 (nn/zero_channels.h).
//
// Activations: a Model keeps what backward needs for its last forward only. The stage keeps the
// inputs it received for each micro-batch in flight and re-runs the forward of micro-batch j just
// before its backward when another forward ran since (GPipe's re-materialisation, Huang et al.,
// Sec. 2.3): same Dropout seed, the recomputation's BatchNorm moments discarded. Cost: one more
// forward per micro-batch and stage, except for the backward that directly follows its forward
// (gpipe: the last micro-batch; 1f1b: every micro-batch of the last stage). Memory: the stage's
// inputs of the micro-batches in flight plus one micro-batch's internal activations.
//
// BatchNormalization in training mode normalises each micro-batch with its own statistics (as
// PyTorch's Pipe and GPipe do); the moments of each micro-batch's original forward are returned
// in micro-batch order for the running statistics (train/batchnorm_sync.h).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "dist/communicator.h"
#include "nn/model.h"
#include "nn/pipeline.h"

namespace hpcnn::train {

struct PipelineOp {
  bool forward = true;
  int micro = 0;
};

// The operations of stage `stage` of `stages` for `micro_batches` micro-batches, in order
// (schedule: "gpipe" or "1f1b"; ErrorKind::usage otherwise).
std::vector<PipelineOp> pipeline_order(const std::string& schedule, int stage, int stages, int micro_batches);

struct PipelineCounters {
  uint64_t bytes_sent = 0;         // activations and gradients sent to the neighbouring stages
  double idle_seconds = 0;         // waiting for a neighbour's message (receives and the step's last sends)
  double step_seconds = 0;         // inside step()
  int64_t steps = 0;
  int64_t recomputed = 0;          // forwards re-run before a backward
  uint64_t peak_stashed_bytes = 0; // the largest sum of stored stage inputs of micro-batches in flight
};

class PipelineRunner {
 public:
  // `world`: every rank of the job (P x D); this rank runs stage rank / D for replica rank % D
  // (stage_of / replica_of). Splits `world` into the stages' replica groups (collective).
  PipelineRunner(dist::Communicator& world, const nn::PipelineSplit& split, int replicas, const std::string& schedule);
  ~PipelineRunner();
  // The stage's model (a model of split.stages[stage()].model built with ModelOptions::input_grads
  // for every stage but the first, its BatchNorm statistics in deferred mode); the caller owns it.
  void set_model(nn::Model& model) { model_ = &model; }
  // Masked messages: for each crossing value named, the channels (axis 1, ascending, in range)
  // that travel; values not named travel whole. Call on every rank alike, before the first step.
  // ErrorKind::usage for a channel list that is not ascending and in range, naming the value.
  void set_kept_channels(std::map<std::string, std::vector<int64_t>> kept);

  int stage() const { return stage_; }
  int stages() const { return stages_; }
  int replica() const { return replica_; }
  bool first() const { return stage_ == 0; }
  bool last() const { return stage_ == stages_ - 1; }
  nn::Model& model() { return *model_; }
  // The D ranks that run this stage (the gradient exchange and BatchNorm moments of the stage).
  dist::Communicator& replicas_comm() { return *replicas_; }

  struct StepIo {
    std::function<Tensor(int micro)> input;                                  // first stage: the micro-batch's samples
    std::function<double(int micro, const Tensor& output, Tensor& grad)> loss;  // last stage: loss, d loss / d output 0
    std::function<uint64_t(int micro)> seed;                                 // Dropout seed of the micro-batch
  };
  // One step of `micro_batches` micro-batches of `micro_batch` samples: gradients accumulate into
  // the stage's Parameter::grad (zeroed by the caller). Returns the BatchNorm moments of each
  // micro-batch's forward, in micro-batch order (empty entries for a stage without BatchNorm).
  std::vector<std::vector<nn::ChannelMoments>> step(int micro_batches, int64_t micro_batch, const StepIo& io);

  const PipelineCounters& counters() const { return counters_; }

 private:
  struct Pending;
  dist::Communicator& world_;
  const nn::PipelineSplit& split_;
  int stages_, replicas_count_, stage_, replica_;
  std::string schedule_;
  std::unique_ptr<dist::Communicator> replicas_;
  nn::Model* model_ = nullptr;
  std::map<std::string, std::vector<int64_t>> kept_;
  PipelineCounters counters_;
};

}  // namespace hpcnn::train
