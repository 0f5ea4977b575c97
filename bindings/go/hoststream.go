package vpmm

// #include "vpmm_go.h"
import "C"

// HostStream is a host-backend stream (vpmm_host_streams.h), for tests and
// for modelling a GPU on the host backend (as `vpmm replay --gpu-lag` does):
// work on it runs in order on a worker thread, and a held stream runs nothing
// until released, so events recorded on it stay pending, the way a test keeps
// "GPU work" in flight. A program that only allocates never needs it.
type HostStream struct {
	s C.uintptr_t
}

// NewHostStream creates a host stream; Close drains and destroys it.
func NewHostStream() (*HostStream, error) {
	var m msg
	var s C.uintptr_t
	if err := result(C.go_vpmm_host_stream_create(&s, &m), &m); err != nil {
		return nil, err
	}
	return &HostStream{s: s}, nil
}

// Stream is the handle to pass to a host-backend pool.
func (h *HostStream) Stream() Stream { return Stream(h.s) }

// Hold stops the stream from running queued work until Release; holds nest.
func (h *HostStream) Hold() error {
	var m msg
	return result(C.go_vpmm_host_stream_hold(h.s, &m), &m)
}

// Release undoes one Hold. Errors: ErrWrongState (not held).
func (h *HostStream) Release() error {
	var m msg
	return result(C.go_vpmm_host_stream_release(h.s, &m), &m)
}

// Synchronize waits until everything queued has run. Errors: ErrWrongState
// (held: it would never finish).
func (h *HostStream) Synchronize() error {
	var m msg
	return result(C.go_vpmm_host_stream_synchronize(h.s, &m), &m)
}

// Close drains and destroys the stream; pools must not use it afterwards.
func (h *HostStream) Close() error {
	var m msg
	return result(C.go_vpmm_host_stream_destroy(h.s, &m), &m)
}
