// hpcnn fcl: the factorisations that initialise a structured sparse first FC layer from the dense
// one (Matsumura et al., "A novel structured sparse fully connected layer in convolutional neural
// networks", CCPE 2021, doi 10.1002/cpe.6213; the exact layer shape is our reading of it, see
// tools/sparsify-fcl/README.md).
//
// The dense layer: y[o] = sum_{c, s} W[o, c*HW + s] * x[c, s] + b[o], for an input of C channels
// and HW = H*W positions flattened channel-major (ONNX Flatten / Reshape of NCHW), O outputs; for
// a 3-D convolution's NCDHW map HW stands for the D*H*W positions (the algebra is the same).
//
// Channel structure (rank r = c', the channels kept): a 1x1 convolution A [r, C] shared over the
// positions, then a dense layer B [O, r*HW]:  W[o, c*HW + s] ~ sum_k B[o, k*HW + s] * A[k, c].
// svd: the rank-r truncated SVD of W viewed as the (O*HW) x C matrix M[(o, s), c] = W[o, c*HW + s]
// is M ~ (M V_r) V_r^T with V_r the top r right singular vectors, so A = V_r^T and B from M V_r:
// the Frobenius-optimal rank-r approximation (Eckart-Young). Computed from the C x C Gram matrix
// M^T M (eigenvectors = right singular vectors), in double.
//
// Spatial structure (k outputs per channel): a per-channel dense map over the positions, a
// grouped HxW convolution with group = C, weight Q [C*k, HW], then a dense layer P [O, C*k]:
// W[o, c*HW + s] ~ sum_j P[o, c*k + j] * Q[c*k + j, s]. svd: per channel c the rank-k truncated
// SVD of the O x HW block W_c = W[:, c*HW : (c+1)*HW], Q_c = V_k^T and P_c = W_c V_k.
//
// data (channel structure): with Sigma the C x C second moment of the layer's input channels over
// positions and samples (measure/channel_moments.h), the expected output error
// E||(W - W') x||^2 = ||(M - M') Sigma^(1/2)||_F^2 when the positions are treated as uncorrelated
// (an approximation: neighbouring positions are correlated in practice) is minimised by the
// truncated SVD of M Sigma^(1/2): V_r its top right singular vectors, A = V_r^T Sigma^(-1/2),
// B = M Sigma^(1/2) V_r. Sigma^(-1/2) is regularised: eigenvalues below 1e-6 of the largest (dead
// channels) are raised to it.
//
// random: A (or Q) with orthonormal rows drawn from a seeded Gaussian, and B (or P) its least
// squares fit (B = M A^T in that case): a data-free start that still keeps the layer's scale.
//
// Matrices are row-major std::vector<double>. Errors: ErrorKind::usage for ranks outside
// [1, C] (channel) or [1, HW] (spatial).
#pragma once

#include <cstdint>
#include <vector>

namespace hpcnn::fcl {

struct ChannelFactors {
  std::vector<double> A;  // [r, C]
  std::vector<double> B;  // [O, r*HW]
};

struct SpatialFactors {
  std::vector<double> Q;  // [C*k, HW]
  std::vector<double> P;  // [O, C*k]
};

enum class Init { svd, data, random };

// W: [O, C*HW].
// `sigma` ([C, C], symmetric positive semi-definite) is required by Init::data (ErrorKind::usage otherwise).
ChannelFactors factor_channels(const std::vector<double>& W, int64_t O, int64_t C, int64_t HW, int64_t rank, Init init,
                               uint64_t seed = 1, const std::vector<double>* sigma = nullptr);
SpatialFactors factor_spatial(const std::vector<double>& W, int64_t O, int64_t C, int64_t HW, int64_t k, Init init,
                              uint64_t seed = 1);

// The dense weight [O, C*HW] that the factors compute.
std::vector<double> compose(const ChannelFactors& f, int64_t O, int64_t C, int64_t HW, int64_t rank);
std::vector<double> compose(const SpatialFactors& f, int64_t O, int64_t C, int64_t HW, int64_t k);

// ||W - W'||_F / ||W||_F (0 for W = 0).
double relative_error(const std::vector<double>& W, const std::vector<double>& approx);
// The expected relative output error of W' for inputs of channel second moment sigma (positions
// uncorrelated): ||(M - M') Sigma^(1/2)||_F / ||M Sigma^(1/2)||_F, M as above.
double relative_output_error(const std::vector<double>& W, const std::vector<double>& approx, int64_t O, int64_t C, int64_t HW,
                             const std::vector<double>& sigma);

}  // namespace hpcnn::fcl
