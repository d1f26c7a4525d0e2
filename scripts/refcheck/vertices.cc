// Quiver's cross-check harness for the vertex finder: runs the reference's own serial
// clustering (density, DBSCAN or iterative), fit, split, refit and pT² sort
// (pixeltrack-standalone's plugin-PixelVertexFinding, compiled from a checkout the user
// provides) on the records written to stdin by reco's ignored test
// `vertices::tests::matches_reference_harness`.
//
// Input, binary little-endian, per record: i32 algorithm (0 density, 1 DBSCAN,
// 2 iterative), u32 number of tracks nt, f32 zt[nt], ezt2[nt], ptt2[nt].
// Output per record: u32 nv, i32 idv[nt], f32 zv[nv], wv[nv], chi2[nv], ptv2[nv],
// i32 ndof[nv], i32 sortInd[nv].
//
// The parameters are the reference's producer defaults (minT 2, eps 0.07 cm, errmax
// 0.01 cm, chi2max 9; fits with χ² cuts 50 then 5000, split at 9), which are also Quiver's.
// Built and run by scripts/refcheck.sh.

#include <cstdint>
#include <cstdio>
#include <memory>
#include <vector>

#include "gpuVertexFinder.h"
#include "gpuClusterTracksByDensity.h"
#include "gpuClusterTracksDBSCAN.h"
#include "gpuClusterTracksIterative.h"
#include "gpuFitVertices.h"
#include "gpuSortByPt2.h"
#include "gpuSplitVertices.h"

namespace {
  template <typename T>
  bool get(T* v, size_t n) {
    return std::fread(v, sizeof(T), n, stdin) == n;
  }
  template <typename T>
  void put(T const* v, size_t n) {
    std::fwrite(v, sizeof(T), n, stdout);
  }
}  // namespace

int main() {
  auto soa = std::make_unique<ZVertexSoA>();
  auto ws = std::make_unique<gpuVertexFinder::WorkSpace>();
  int32_t algo;
  uint32_t nt;
  while (get(&algo, 1)) {
    if (!get(&nt, 1) || nt > gpuVertexFinder::WorkSpace::MAXTRACKS || algo < 0 || algo > 2) {
      std::fprintf(stderr, "vertices: bad record header\n");
      return 2;
    }
    gpuVertexFinder::init(soa.get(), ws.get());
    ws->ntrks = nt;
    if (!get(ws->zt, nt) || !get(ws->ezt2, nt) || !get(ws->ptt2, nt)) {
      std::fprintf(stderr, "vertices: truncated record\n");
      return 2;
    }
    for (uint32_t i = 0; i < nt; ++i) {
      ws->itrk[i] = uint16_t(i);
      soa->idv[i] = -1;
    }
    int minT = 2;
    float eps = 0.07f, errmax = 0.01f, chi2max = 9.f;
    if (algo == 0)
      gpuVertexFinder::clusterTracksByDensity(soa.get(), ws.get(), minT, eps, errmax, chi2max);
    else if (algo == 1)
      gpuVertexFinder::clusterTracksDBSCAN(soa.get(), ws.get(), minT, eps, errmax, chi2max);
    else
      gpuVertexFinder::clusterTracksIterative(soa.get(), ws.get(), minT, eps, errmax, chi2max);
    gpuVertexFinder::fitVertices(soa.get(), ws.get(), 50.);
    gpuVertexFinder::splitVertices(soa.get(), ws.get(), 9.f);
    gpuVertexFinder::fitVertices(soa.get(), ws.get(), 5000.);
    gpuVertexFinder::sortByPt2(soa.get(), ws.get());
    uint32_t nv = soa->nvFinal;
    put(&nv, 1);
    std::vector<int32_t> idv(soa->idv, soa->idv + nt);  // int16 in the SoA, i32 on the wire
    put(idv.data(), nt);
    put(soa->zv, nv);
    put(soa->wv, nv);
    put(soa->chi2, nv);
    put(soa->ptv2, nv);
    put(soa->ndof, nv);
    std::vector<int32_t> sortInd(soa->sortInd, soa->sortInd + nv);
    put(sortInd.data(), nv);
  }
  std::fflush(stdout);
  return 0;
}
