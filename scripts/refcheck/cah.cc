// Quiver's cross-check harness for the CA tracking: runs the reference's own serial CA
// (pixeltrack-standalone's CAHitNtupletGeneratorKernels, the Broken Line or Riemann fit
// and the classification, compiled from a checkout the user provides) on one event of
// hits written to stdin by reco's ignored test `reference_ca_cross_check`, and prints every
// tuple in the reference's tuple order.
//
// Input, whitespace separated: the number of hits; per hit x y z r (f32 bits), iphi,
// size_x, size_y, detIndex, xerr yerr (f32 bits); the 11 layer starts; then, per module,
// its frame: position x y z and the 9 rotation terms (f32 bits). Argument `riemann`: the
// Riemann fit instead of the Broken Line.
// Output, one line per tuple: the number of hits, the hits, the quality, then pT, η, χ²,
// the 5 state and 15 covariance terms (f32 bits).
//
// Built (with the reference's code-generation flags) and run by scripts/refcheck.sh. The reconstruction parameters are the reference's
// defaults (its CAHitNtupletGeneratorOnGPU), which are also Quiver's.

#include <cstdint>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "CUDACore/HistoContainer.h"
#include "CUDADataFormats/PixelTrackHeterogeneous.h"
#include "CUDADataFormats/TrackingRecHit2DHeterogeneous.h"
#include "CondFormats/pixelCPEforGPU.h"
#include "CAHitNtupletGeneratorKernels.h"
#include "HelixFitOnGPU.h"
#include "bits.h"

namespace {

  using refcheck::bits;
  using refcheck::f32;

  cAHitNtupletGenerator::QualityCuts defaultCuts() {
    cAHitNtupletGenerator::QualityCuts c{};
    // The reference's chi2 polynomial (its doubles rounded to float), pT cap and scale.
    double coeff[4] = {0.68177776, 0.74609577, -0.08035491, 0.00315399};
    for (int i = 0; i < 4; ++i)
      c.chi2Coeff[i] = float(coeff[i]);
    c.chi2MaxPt = 10.f;
    c.chi2Scale = 30.f;
    c.triplet = {0.3f, 0.5f, 12.f};
    c.quadruplet = {0.5f, 0.3f, 12.f};
    return c;
  }

}  // namespace

int main(int argc, char** argv) {
  bool riemann = argc > 1 && std::string(argv[1]) == "riemann";
  uint32_t nHits;
  if (!(std::cin >> nHits)) {
    std::cerr << "cah: no hit count\n";
    return 2;
  }
  struct Hit {
    uint32_t x, y, z, r;
    int iphi, sx, sy, det;
    uint32_t xe, ye;
  };
  std::vector<Hit> in(nHits);
  for (auto& h : in)
    if (!(std::cin >> h.x >> h.y >> h.z >> h.r >> h.iphi >> h.sx >> h.sy >> h.det >> h.xe >> h.ye)) {
      std::cerr << "cah: truncated hits\n";
      return 2;
    }
  uint32_t layerStart[11];
  for (auto& l : layerStart)
    if (!(std::cin >> l)) {
      std::cerr << "cah: truncated layer starts\n";
      return 2;
    }
  std::vector<pixelCPEforGPU::DetParams> det;
  uint32_t p[12];
  while (std::cin >> p[0]) {
    for (int i = 1; i < 12; ++i)
      if (!(std::cin >> p[i])) {
        std::cerr << "cah: truncated module frame\n";
        return 2;
      }
    float r[9];
    for (int i = 0; i < 9; ++i)
      r[i] = f32(p[3 + i]);
    pixelCPEforGPU::DetParams d{};
    d.frame = pixelCPEforGPU::Frame(f32(p[0]), f32(p[1]), f32(p[2]), SOARotation<float>(r));
    det.push_back(d);
  }

  // The CPE parameters: only the module frames are read by the tracking (the fit's hit
  // covariances); the rest stays zero.
  pixelCPEforGPU::CommonParams common{};
  pixelCPEforGPU::LayerGeometry layers{};
  pixelCPEforGPU::AverageGeometry average{};
  pixelCPEforGPU::ParamsOnGPU cpe{&common, det.data(), &layers, &average};
  std::vector<uint32_t> moduleStart(2001, 0);

  TrackingRecHit2DCPU hits(nHits, &cpe, moduleStart.data(), nullptr);
  auto* v = hits.view();
  for (uint32_t i = 0; i < nHits; ++i) {
    auto const& h = in[i];
    v->xGlobal(i) = f32(h.x);
    v->yGlobal(i) = f32(h.y);
    v->zGlobal(i) = f32(h.z);
    v->rGlobal(i) = f32(h.r);
    v->iphi(i) = int16_t(h.iphi);
    v->clusterSizeX(i) = int16_t(h.sx);
    v->clusterSizeY(i) = int16_t(h.sy);
    v->detectorIndex(i) = uint16_t(h.det);
    v->xerrLocal(i) = f32(h.xe);
    v->yerrLocal(i) = f32(h.ye);
  }
  if (nHits > 0) {
    for (int l = 0; l < 11; ++l)
      hits.hitsLayerStart()[l] = layerStart[l];
    cms::cuda::fillManyFromVector(hits.phiBinner(), 10, hits.iphi(), hits.hitsLayerStart(), nHits);
  }

  cAHitNtupletGenerator::Params params(false, 3, 458752, riemann, true, true, true, false, true, false, true, true, true,
                                       0.899999976158, 0.00200000009499, 0.00300000002608, 0.0328407224959,
                                       0.15000000596, 0.25, defaultCuts());
  auto soa = std::make_unique<pixelTrack::TrackSoA>();
  cAHitNtupletGenerator::Counters counters{};
  CAHitNtupletGeneratorKernelsCPU kernels(params);
  kernels.counters_ = &counters;
  kernels.allocateOnGPU(nullptr);
  kernels.buildDoublets(hits, nullptr);
  kernels.launchKernels(hits, soa.get(), nullptr);
  kernels.fillHitDetIndices(hits.view(), soa.get(), nullptr);
  if (nHits > 0) {
    // The field the reference's producer hands the fitter (1 / 87.52 GeV⁻¹·cm⁻¹ as a float).
    HelixFitOnGPU fitter(float(0.0114256972711507), params.fit5as4_);
    fitter.allocateOnGPU(&(soa->hitIndices), kernels.tupleMultiplicity(), soa.get());
    if (riemann)
      fitter.launchRiemannKernelsOnCPU(hits.view(), nHits, CAConstants::maxNumberOfQuadruplets());
    else
      fitter.launchBrokenLineKernelsOnCPU(hits.view(), nHits, CAConstants::maxNumberOfQuadruplets());
    kernels.classifyTuples(hits, soa.get(), nullptr);
  }

  auto const& tuples = soa->hitIndices;
  for (uint32_t it = 0; it < tuples.nbins() && tuples.size(it) > 0; ++it) {
    std::cout << tuples.size(it);
    for (auto h = tuples.begin(it); h != tuples.end(it); ++h)
      std::cout << ' ' << *h;
    std::cout << ' ' << int(soa->quality(it)) << ' ' << bits(soa->pt(it)) << ' ' << bits(soa->eta(it)) << ' '
              << bits(soa->chi2(it));
    for (int k = 0; k < 5; ++k)
      std::cout << ' ' << bits(soa->stateAtBS.state(it)(k));
    for (int k = 0; k < 15; ++k)
      std::cout << ' ' << bits(soa->stateAtBS.covariance(it)(k));
    std::cout << '\n';
  }
  return 0;
}
