// Package vpmm is the Go binding of libvpmm, a GPU virtual-memory pool
// allocator with a C ABI (vpmm.h).
//
// A Pool hands out device memory (device pointers are uintptr values) from
// physical pages it maps into reserved virtual address space, remapping pages
// to defragment instead of asking the driver for more. Tagged allocations can
// be paused (physical memory released, bytes optionally backed up on the
// host) and resumed at the same addresses; reservations promise capacity;
// out-of-memory and pressure callbacks take Go functions.
//
// Every failure is an *Error carrying the library's Status and message
// (vpmm_last_error). The message is per OS thread in C and consecutive cgo
// calls may run on different threads, so each call goes through a small C
// wrapper that copies the message in the same C call (see vpmm.h,
// vpmm_last_error_copy). Compare errors with errors.Is against the sentinel
// errors (ErrOutOfMemory, ...).
//
// # Building
//
// The package finds libvpmm with pkg-config (`#cgo pkg-config: vpmm`), which
// is all an installed library needs (`meson install`; set PKG_CONFIG_PATH for
// a non-standard prefix). The program then runs without LD_LIBRARY_PATH:
// outside /usr, vpmm.pc gives it an rpath to the library's directory, and
// under /usr the loader finds the library once ldconfig has run. To build
// against an uninstalled in-tree build instead, use the vpmm_intree build
// tag, which looks in ../../include and ../../build and sets a RUNPATH to
// ../../build; for another build directory, add its -I, -L and rpath:
//
//	CGO_CFLAGS=-I$PWD/../../build-ci/include \
//	CGO_LDFLAGS="-L$PWD/../../build-ci -Wl,-rpath,$PWD/../../build-ci" go test -tags vpmm_intree ./...
//
// Tests run on the host backend (no GPU).
package vpmm
