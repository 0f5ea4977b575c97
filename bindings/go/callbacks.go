package vpmm

// #include <stdint.h>
// #include "vpmm.h"
// uint64_t go_vpmm_thread(void);
import "C"

import (
	"runtime/cgo"
	"sync"
)

// The OOM and pressure callbacks. Each pool owns one cgo.Handle for its whole
// life, to a callbacks value holding the current Go functions; the handle's
// integer value is the C callbacks' user pointer (no Go pointer is handed to
// C). The trampolines of callbacks.c pass it back to the exported functions
// below, which run on the goroutine of the Pool call that triggered them.
// Replacing a function only swaps it under the mutex, so a callback already
// running with the old one is never left with a deleted handle; the handle
// is deleted by Close, after vpmm_pool_destroy, when none can run.
//
// A Go panic must not unwind through the C frames of libvpmm: the exported
// functions recover it, answer "no retry", and park it with the OS thread it
// ran on; the Pool method whose C call ran on that thread (the C wrapper
// reports the thread) raises it again once the call has returned.

// Pressure is what the pressure callback is told.
type Pressure struct {
	UnderPressure bool   // true: crossed the trigger watermark upward; false: fell to the stop mark
	MappedBytes   uint64 // the pool's mapped bytes at that moment
}

type callbacks struct {
	pool     *Pool
	mu       sync.Mutex
	oom      func(p *Pool, bytes uint64) bool
	pressure func(p *Pool, ev Pressure)
}

type parkedPanic struct {
	thread uint64
	value  interface{}
}

func (c *callbacks) recovered(v interface{}) {
	c.pool.panicMu.Lock()
	c.pool.panics = append(c.pool.panics, parkedPanic{uint64(C.go_vpmm_thread()), v})
	c.pool.panicMu.Unlock()
}

//export goVpmmOOM
func goVpmmOOM(_ *C.vpmm_pool, bytes C.uint64_t, h C.uintptr_t) (retry C.int) {
	c := cgo.Handle(h).Value().(*callbacks)
	defer func() {
		if v := recover(); v != nil {
			c.recovered(v)
			retry = 0
		}
	}()
	c.mu.Lock()
	f := c.oom
	c.mu.Unlock()
	if f != nil && f(c.pool, uint64(bytes)) {
		return 1
	}
	return 0
}

//export goVpmmPressure
func goVpmmPressure(_ *C.vpmm_pool, under C.int, mapped C.uint64_t, h C.uintptr_t) {
	c := cgo.Handle(h).Value().(*callbacks)
	defer func() {
		if v := recover(); v != nil {
			c.recovered(v)
		}
	}()
	c.mu.Lock()
	f := c.pressure
	c.mu.Unlock()
	if f != nil {
		f(c.pool, Pressure{UnderPressure: under != 0, MappedBytes: uint64(mapped)})
	}
}
