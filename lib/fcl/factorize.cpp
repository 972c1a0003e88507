#include "fcl/factorize.h"

#include <Eigen/Dense>
#include <cmath>
#include <random>

#include "core/error.h"

namespace hpcnn::fcl {
namespace {

using Mat = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

// Top `rank` eigenvectors (as rows, largest eigenvalue first) of a symmetric matrix.
Mat top_eigenvectors(const Mat& gram, int64_t rank) {
  Eigen::SelfAdjointEigenSolver<Mat> es(gram);
  if (es.info() != Eigen::Success)
    throw_error(ErrorKind::unsupported, "the eigendecomposition of the Gram matrix failed (non-finite weights?)");
  const int64_t n = gram.rows();
  Mat rows(rank, n);
  for (int64_t k = 0; k < rank; ++k) rows.row(k) = es.eigenvectors().col(n - 1 - k).transpose();  // ascending order
  return rows;
}

// `rank` orthonormal rows of length n from a seeded Gaussian (QR of a Gaussian matrix).
Mat random_orthonormal_rows(int64_t rank, int64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> g;
  Mat m(n, rank);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < rank; ++j) m(i, j) = g(rng);
  Eigen::HouseholderQR<Mat> qr(m);
  Mat q = qr.householderQ() * Mat::Identity(n, rank);
  return q.transpose();
}

// M[(o, s), c] = W[o, c*HW + s]
Mat channel_matrix(const std::vector<double>& W, int64_t O, int64_t C, int64_t HW) {
  Mat M(O * HW, C);
  for (int64_t o = 0; o < O; ++o)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t s = 0; s < HW; ++s) M(o * HW + s, c) = W[static_cast<size_t>(o * C * HW + c * HW + s)];
  return M;
}

// Sigma^(1/2) and the regularised Sigma^(-1/2).
std::pair<Mat, Mat> sqrt_and_inverse_sqrt(const std::vector<double>& sigma, int64_t C) {
  if (static_cast<int64_t>(sigma.size()) != C * C)
    throw_error(ErrorKind::usage,
                "the input second moment has " + std::to_string(sigma.size()) + " entries, not " + std::to_string(C * C));
  const Mat S = Eigen::Map<const Mat>(sigma.data(), C, C);
  Eigen::SelfAdjointEigenSolver<Mat> es(S);
  if (es.info() != Eigen::Success)
    throw_error(ErrorKind::unsupported, "the eigendecomposition of the input second moment failed");
  const Eigen::VectorXd lambda = es.eigenvalues().cwiseMax(0.0);
  const double floor = std::max(lambda.maxCoeff(), 1e-300) * 1e-6;
  const Mat& Q = es.eigenvectors();
  const Mat root = Q * lambda.cwiseSqrt().asDiagonal() * Q.transpose();
  const Mat inv_root = Q * lambda.cwiseMax(floor).cwiseSqrt().cwiseInverse().asDiagonal() * Q.transpose();
  return {root, inv_root};
}

void check_rank(int64_t rank, int64_t max, const char* what) {
  if (rank < 1 || rank > max)
    throw_error(ErrorKind::usage,
                std::string(what) + " " + std::to_string(rank) + " must lie in [1, " + std::to_string(max) + "]");
}

}  // namespace

ChannelFactors factor_channels(const std::vector<double>& W, int64_t O, int64_t C, int64_t HW, int64_t rank, Init init,
                               uint64_t seed, const std::vector<double>* sigma) {
  check_rank(rank, C, "the channel count c'");
  const Mat M = channel_matrix(W, O, C, HW);
  Mat A, MV;  // A [k, c]; MV = B as [(o, s), k]
  if (init == Init::data) {
    if (!sigma) throw_error(ErrorKind::usage, "the data initialisation needs the input channels' second moment");
    const auto [root, inv_root] = sqrt_and_inverse_sqrt(*sigma, C);
    const Mat Mw = M * root;
    const Mat V = top_eigenvectors(Mw.transpose() * Mw, rank);  // [k, c]
    A = V * inv_root;
    MV = Mw * V.transpose();
  } else {
    A = init == Init::svd ? top_eigenvectors(M.transpose() * M, rank) : random_orthonormal_rows(rank, C, seed);
    MV = M * A.transpose();
  }
  ChannelFactors f;
  f.A.assign(A.data(), A.data() + A.size());
  f.B.resize(static_cast<size_t>(O * rank * HW));
  for (int64_t o = 0; o < O; ++o)
    for (int64_t k = 0; k < rank; ++k)
      for (int64_t s = 0; s < HW; ++s) f.B[static_cast<size_t>(o * rank * HW + k * HW + s)] = MV(o * HW + s, k);
  return f;
}

SpatialFactors factor_spatial(const std::vector<double>& W, int64_t O, int64_t C, int64_t HW, int64_t k, Init init,
                              uint64_t seed) {
  check_rank(k, HW, "the outputs per channel k");
  if (init == Init::data) throw_error(ErrorKind::usage, "the data initialisation is for the channel structure");
  SpatialFactors f;
  f.Q.resize(static_cast<size_t>(C * k * HW));
  f.P.resize(static_cast<size_t>(O * C * k));
  for (int64_t c = 0; c < C; ++c) {
    Mat Wc(O, HW);
    for (int64_t o = 0; o < O; ++o)
      for (int64_t s = 0; s < HW; ++s) Wc(o, s) = W[static_cast<size_t>(o * C * HW + c * HW + s)];
    const Mat Q = init == Init::svd ? top_eigenvectors(Wc.transpose() * Wc, k) : random_orthonormal_rows(k, HW, seed + c);
    const Mat P = Wc * Q.transpose();  // [O, k]
    for (int64_t j = 0; j < k; ++j)
      for (int64_t s = 0; s < HW; ++s) f.Q[static_cast<size_t>((c * k + j) * HW + s)] = Q(j, s);
    for (int64_t o = 0; o < O; ++o)
      for (int64_t j = 0; j < k; ++j) f.P[static_cast<size_t>(o * C * k + c * k + j)] = P(o, j);
  }
  return f;
}

std::vector<double> compose(const ChannelFactors& f, int64_t O, int64_t C, int64_t HW, int64_t rank) {
  std::vector<double> W(static_cast<size_t>(O * C * HW), 0.0);
  for (int64_t o = 0; o < O; ++o)
    for (int64_t k = 0; k < rank; ++k)
      for (int64_t c = 0; c < C; ++c) {
        const double a = f.A[static_cast<size_t>(k * C + c)];
        for (int64_t s = 0; s < HW; ++s)
          W[static_cast<size_t>(o * C * HW + c * HW + s)] += f.B[static_cast<size_t>(o * rank * HW + k * HW + s)] * a;
      }
  return W;
}

std::vector<double> compose(const SpatialFactors& f, int64_t O, int64_t C, int64_t HW, int64_t k) {
  std::vector<double> W(static_cast<size_t>(O * C * HW), 0.0);
  for (int64_t o = 0; o < O; ++o)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t j = 0; j < k; ++j) {
        const double p = f.P[static_cast<size_t>(o * C * k + c * k + j)];
        for (int64_t s = 0; s < HW; ++s)
          W[static_cast<size_t>(o * C * HW + c * HW + s)] += p * f.Q[static_cast<size_t>((c * k + j) * HW + s)];
      }
  return W;
}

double relative_error(const std::vector<double>& W, const std::vector<double>& approx) {
  double num = 0, den = 0;
  for (size_t i = 0; i < W.size(); ++i) {
    num += (W[i] - approx[i]) * (W[i] - approx[i]);
    den += W[i] * W[i];
  }
  return den > 0 ? std::sqrt(num / den) : 0.0;
}

}  // namespace hpcnn::fcl

namespace hpcnn::fcl {

double relative_output_error(const std::vector<double>& W, const std::vector<double>& approx, int64_t O, int64_t C, int64_t HW,
                             const std::vector<double>& sigma) {
  const Mat root = sqrt_and_inverse_sqrt(sigma, C).first;
  const Mat M = channel_matrix(W, O, C, HW) * root;
  const Mat D = M - channel_matrix(approx, O, C, HW) * root;
  const double den = M.norm();
  return den > 0 ? D.norm() / den : 0.0;
}

}  // namespace hpcnn::fcl
