//go:build !vpmm_intree

package vpmm

// The installed library, found by pkg-config (vpmm.pc from meson install).

// #cgo pkg-config: vpmm
import "C"
