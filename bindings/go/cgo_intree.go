//go:build vpmm_intree

package vpmm

// The uninstalled library of the libvpmm checkout this package sits in:
// headers from include/ and build/include (vpmm_version.h), libvpmm.so from
// build/, which programs built this way also get as their RUNPATH (so
// `go test -tags vpmm_intree` runs without LD_LIBRARY_PATH, which still
// wins). CGO_CFLAGS and CGO_LDFLAGS may name another build directory first.

// #cgo CFLAGS: -I${SRCDIR}/../../include -I${SRCDIR}/../../build/include
// #cgo LDFLAGS: -L${SRCDIR}/../../build -lvpmm
// #cgo LDFLAGS: -Wl,--enable-new-dtags -Wl,-rpath,${SRCDIR}/../../build
import "C"
