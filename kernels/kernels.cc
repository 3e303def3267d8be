// Anchor translation unit so that tptune_kernels always has a source; the kernels live in cpu/ and cuda/.
namespace tptune::kernels {
int kernels_anchor = 0;
}
