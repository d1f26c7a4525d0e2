// Quiver's cross-check harness for the helix fits: runs the reference's own Broken Line and
// Riemann fits (pixeltrack-standalone's serial headers, compiled with Eigen, from a checkout
// the user provides) on the fits written to stdin by reco's ignored test
// `reference_fit_cross_check`, and prints every output as bits, one line per fit.
//
// Input, whitespace separated, per fit: `kind n` (kind 0 = Broken Line, 1 = Riemann; n = 3,
// 4 or 5 hits), the hits' x y z (f64 bits, hit after hit), their 6 global covariance terms
// (f32 bits, hit after hit), and the field B (f64 bits).
// Output per fit: fast fit (4 × f64), circle parameters (3 × f64), circle covariance (3 × 3
// × f64, row major), circle χ² (f32), charge (integer), line parameters (2 × f64), line
// covariance (2 × 2 × f64, row major), line χ² (f64); bits as unsigned integers.
//
// Built (with the reference's code-generation flags) and run by scripts/refcheck.sh. The hits and covariances live in strided maps, as in
// the reference's fit kernels (BrokenLineFitOnGPU.h, RiemannFitOnGPU.h), so Eigen evaluates
// the same expressions the same way.

#include <cstdint>
#include <iostream>
#include <vector>

#include <Eigen/Core>

#include "BrokenLine.h"
#include "bits.h"
#include "RiemannFit.h"

namespace {

  constexpr uint32_t kStride = 32 * 1024;  // the reference's maxNumberOfConcurrentFits
  template <int N>
  using Map3xNd = Eigen::Map<Eigen::Matrix<double, 3, N>, 0, Eigen::Stride<3 * kStride, kStride>>;
  template <int N>
  using Map6xNf = Eigen::Map<Eigen::Matrix<float, 6, N>, 0, Eigen::Stride<6 * kStride, kStride>>;
  using Map4d = Eigen::Map<Eigen::Vector4d, 0, Eigen::InnerStride<kStride>>;

  using refcheck::bits;
  using refcheck::f32;
  using refcheck::f64;

  template <typename Circle, typename Line, typename Fast>
  void print(Fast const& fast, Circle const& circle, Line const& line) {
    for (int i = 0; i < 4; ++i)
      std::cout << bits(double(fast(i))) << ' ';
    for (int i = 0; i < 3; ++i)
      std::cout << bits(double(circle.par(i))) << ' ';
    for (int i = 0; i < 3; ++i)
      for (int j = 0; j < 3; ++j)
        std::cout << bits(double(circle.cov(i, j))) << ' ';
    std::cout << bits(float(circle.chi2)) << ' ' << circle.q << ' ';
    for (int i = 0; i < 2; ++i)
      std::cout << bits(double(line.par(i))) << ' ';
    for (int i = 0; i < 2; ++i)
      for (int j = 0; j < 2; ++j)
        std::cout << bits(double(line.cov(i, j))) << ' ';
    std::cout << bits(double(line.chi2)) << '\n';
  }

  template <int N>
  void fit(int kind, std::vector<double>& hbuf, std::vector<float>& gbuf, std::vector<double>& fbuf, double B) {
    Map3xNd<N> hits(hbuf.data());
    Map6xNf<N> hits_ge(gbuf.data());
    Map4d fast(fbuf.data());
    if (kind == 0) {
      // The sequence of kernelBLFastFit and kernelBLFit.
      BrokenLine::BL_Fast_fit(hits, fast);
      BrokenLine::PreparedBrokenLineData<N> data;
      BrokenLine::karimaki_circle_fit circle;
      Rfit::line_fit line;
      BrokenLine::prepareBrokenLineData(hits, fast, B, data);
      BrokenLine::BL_Line_fit(hits_ge, fast, B, data, line);
      BrokenLine::BL_Circle_fit(hits, hits_ge, fast, B, data, circle);
      print(fast, circle, line);
    } else {
      // The sequence of kernelFastFit, kernelCircleFit and kernelLineFit.
      Rfit::Fast_fit(hits, fast);
      Rfit::VectorNd<N> rad = (hits.block(0, 0, 2, N).colwise().norm());
      Rfit::Matrix2Nd<N> hits_cov = Rfit::Matrix2Nd<N>::Zero();
      Rfit::loadCovariance2D(hits_ge, hits_cov);
      Rfit::circle_fit circle = Rfit::Circle_fit(hits.block(0, 0, 2, N), hits_cov, fast, rad, B, true);
      Rfit::line_fit line = Rfit::Line_fit(hits, hits_ge, circle, fast, B, true);
      Rfit::fromCircleToPerigee(circle);
      print(fast, circle, line);
    }
  }

}  // namespace

int main() {
  std::vector<double> hbuf(3 * kStride * 5), fbuf(4 * kStride);
  std::vector<float> gbuf(6 * kStride * 5);
  int kind, n;
  while (std::cin >> kind >> n) {
    if ((kind != 0 && kind != 1) || n < 3 || n > 5) {
      std::cerr << "refit: bad fit header '" << kind << ' ' << n << "'\n";
      return 2;
    }
    uint64_t u;
    uint32_t v;
    for (int k = 0; k < n; ++k)
      for (int r = 0; r < 3; ++r) {
        if (!(std::cin >> u))
          return 2;
        hbuf[r * kStride + k * 3 * kStride] = f64(u);
      }
    for (int k = 0; k < n; ++k)
      for (int r = 0; r < 6; ++r) {
        if (!(std::cin >> v))
          return 2;
        gbuf[r * kStride + k * 6 * kStride] = f32(v);
      }
    if (!(std::cin >> u))
      return 2;
    double B = f64(u);
    switch (n) {
      case 3:
        fit<3>(kind, hbuf, gbuf, fbuf, B);
        break;
      case 4:
        fit<4>(kind, hbuf, gbuf, fbuf, B);
        break;
      default:
        fit<5>(kind, hbuf, gbuf, fbuf, B);
    }
  }
  return 0;
}
