//go:build vpmm_intree

package vpmm

// The uninstalled library of the libvpmm checkout this package sits in:
// headers from include/ and build/include (vpmm_version.h), libvpmm.so from
// build/. CGO_CFLAGS and CGO_LDFLAGS may add another build directory.

// #cgo CFLAGS: -I${SRCDIR}/../../include -I${SRCDIR}/../../build/include
// #cgo LDFLAGS: -L${SRCDIR}/../../build -lvpmm
import "C"
