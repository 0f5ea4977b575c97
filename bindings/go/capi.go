package vpmm

// The C side of the binding (vpmm_go.h): one static inline wrapper per
// libvpmm call.
//
// vpmm_last_error() is per OS thread and two cgo calls may run on different
// threads, so each wrapper makes the call and, on failure, copies the
// message into the caller's go_vpmm_msg in the same C call (the pattern
// vpmm.h documents at vpmm_last_error_copy). Pointers the library hands out
// (device addresses, streams) cross as uintptr_t, so Go never holds them as
// unsafe.Pointer values.

// #include "vpmm_go.h"
import "C"

import "unsafe"

// msg receives the library's message of a failed call.
type msg = C.go_vpmm_msg

// result turns a status and its message into an error (nil for VPMM_OK).
func result(st C.vpmm_status, m *msg) error {
	if st == C.VPMM_OK {
		return nil
	}
	return &Error{Status: Status(st), Message: C.GoString(&m.text[0])}
}

// cstring converts a tag; "" gives NULL (untagged / every tag). The caller
// frees the result with freeString.
func cstring(s string) *C.char {
	if s == "" {
		return nil
	}
	return C.CString(s)
}

func freeString(p *C.char) {
	if p != nil {
		C.free(unsafe.Pointer(p))
	}
}
