package vpmm

// #include "vpmm_go.h"
import "C"

import (
	"context"
	"errors"
	"runtime"
	"runtime/cgo"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"
)

// Stream is a stream of the pool's backend (a CUstream on CUDA, a host
// stream on the host backend) as an integer handle; DefaultStream (0) is the
// backend's default stream. The pool never owns a stream.
type Stream uintptr

// DefaultStream is the backend's default stream (NULL in C).
const DefaultStream Stream = 0

// Pool is a libvpmm pool. Every method may be called concurrently from any
// goroutine, except Close, which must not race other calls on the pool (as
// vpmm_pool_destroy). Methods called after Close return ErrClosed.
type Pool struct {
	p      *C.vpmm_pool
	closed atomic.Bool

	cb cgo.Handle // *callbacks, for the pool's whole life
	// Panics recovered in callbacks, each raised again by the Pool method
	// whose C call ran the callback, once that call has returned.
	panicMu sync.Mutex
	panics  []parkedPanic
}

// NewPool creates a pool (vpmm_pool_create). A nil config means
// ConfigFromEnv(). Errors: ErrInvalidArgument (bad field or malformed
// VPMM_* variable), ErrUnsupported (backend not built or no device),
// ErrOutOfMemory (initial pages), ErrBackend.
func NewPool(config *Config) (*Pool, error) {
	if config == nil {
		c := ConfigFromEnv()
		config = &c
	}
	c, err := config.toC()
	if err != nil {
		return nil, err
	}
	var m msg
	var p *C.vpmm_pool
	if err := result(C.go_vpmm_pool_create(&c, &p, &m), &m); err != nil {
		return nil, err
	}
	pool := &Pool{p: p}
	pool.cb = cgo.NewHandle(&callbacks{pool: pool})
	return pool, nil
}

// Close destroys the pool (vpmm_pool_destroy): it waits for pending stream
// work on pool memory, then releases all memory; pointers from the pool
// become invalid. Calling Close again returns nil.
func (p *Pool) Close() error {
	if !p.closed.CompareAndSwap(false, true) {
		return nil
	}
	var m msg
	err := result(C.go_vpmm_pool_destroy(p.p, &m), &m)
	p.cb.Delete() // no callback can run any more
	return err
}

// call runs one wrapped C call on an open pool and raises a panic that a
// callback recovered during it.
func (p *Pool) call(f func(m *msg) C.vpmm_status) error {
	return p.callUndo(f, nil)
}

// callUndo is call for calls that create something: when a callback
// panicked during a call that succeeded anyway, undo releases what it
// created before the panic is raised again, so nothing leaks.
func (p *Pool) callUndo(f func(m *msg) C.vpmm_status, undo func()) error {
	if p.closed.Load() {
		return ErrClosed
	}
	var m msg
	err := result(f(&m), &m)
	if v, ok := p.takePanic(uint64(m.thread)); ok {
		if err == nil && undo != nil {
			undo()
			// A panic of a callback the undo ran is dropped: the first goes on.
			p.takePanic(uint64(m.thread))
		}
		panic(v)
	}
	return err
}

// takePanic removes and returns the first panic parked by a callback that
// ran on thread.
func (p *Pool) takePanic(thread uint64) (interface{}, bool) {
	p.panicMu.Lock()
	defer p.panicMu.Unlock()
	for i, pp := range p.panics {
		if pp.thread == thread {
			p.panics = append(p.panics[:i], p.panics[i+1:]...)
			return pp.value, true
		}
	}
	return nil, false
}

// BackendName is the pool's kind as Backend.String names it ("" after Close).
func (p *Pool) BackendName() string {
	if p.closed.Load() {
		return ""
	}
	return C.GoString(C.vpmm_pool_backend_name(p.p))
}

// Config is the pool's effective configuration, defaults resolved.
func (p *Pool) Config() (Config, error) {
	var c C.vpmm_config
	err := p.call(func(m *msg) C.vpmm_status { return C.go_vpmm_pool_get_config(p.p, &c, m) })
	if err != nil {
		return Config{}, err
	}
	return configFromC(&c), nil
}

// Malloc allocates size bytes usable on stream in stream order
// (vpmm_pool_malloc) and returns the device pointer, to be freed with Free.
// Inside WithRegion, on the goroutine running it, it takes the scope's tag.
// Errors: ErrInvalidArgument (size 0 or overflowing), ErrOutOfMemory (pool
// unchanged), ErrBackend.
func (p *Pool) Malloc(size uint64, stream Stream) (uintptr, error) {
	var out C.uintptr_t
	err := p.callUndo(func(m *msg) C.vpmm_status {
		return C.go_vpmm_pool_malloc(p.p, C.uint64_t(size), C.uintptr_t(stream), &out, m)
	}, func() {
		var m msg
		C.go_vpmm_pool_free(p.p, out, C.uintptr_t(stream), &m)
	})
	return uintptr(out), err
}

// MallocTagged allocates with a tag (pausable with Pause(tag)); with
// hostBackup a pause copies the bytes to host memory and Resume restores
// them (VPMM_ALLOC_HOST_BACKUP). Errors: those of Malloc, plus
// ErrInvalidArgument for a tag over 63 bytes.
func (p *Pool) MallocTagged(size uint64, stream Stream, tag string, hostBackup bool) (uintptr, error) {
	return p.malloc(size, stream, AllocAttrs{Tag: tag, HostBackup: hostBackup})
}

// AllocAttrs are the attributes of an allocation (vpmm_alloc_attrs).
type AllocAttrs struct {
	Tag         string       // "" = untagged (not pausable)
	HostBackup  bool         // keep the bytes across a pause
	Reservation *Reservation // charge the allocation to it (nil = none)
}

// MallocWith allocates with attributes (vpmm_pool_malloc_ex); explicit
// attributes win over a WithRegion scope.
func (p *Pool) MallocWith(size uint64, stream Stream, attrs AllocAttrs) (uintptr, error) {
	return p.malloc(size, stream, attrs)
}

func (p *Pool) malloc(size uint64, stream Stream, attrs AllocAttrs) (uintptr, error) {
	tag := cstring(attrs.Tag)
	defer freeString(tag)
	var flags C.uint32_t
	if attrs.HostBackup {
		flags = C.VPMM_ALLOC_HOST_BACKUP
	}
	var res *C.vpmm_reservation
	if attrs.Reservation != nil {
		res = attrs.Reservation.r
	}
	var out C.uintptr_t
	err := p.callUndo(func(m *msg) C.vpmm_status {
		return C.go_vpmm_pool_malloc_ex(p.p, C.uint64_t(size), C.uintptr_t(stream), flags, tag, res, &out, m)
	}, func() {
		var m msg
		C.go_vpmm_pool_free(p.p, out, C.uintptr_t(stream), &m)
	})
	return uintptr(out), err
}

// Free frees a pointer from Malloc in the order of stream (vpmm_pool_free):
// work queued on stream before the call may still use the memory. 0 is a
// no-op. Errors: ErrUnknownPointer.
func (p *Pool) Free(ptr uintptr, stream Stream) error {
	return p.call(func(m *msg) C.vpmm_status {
		return C.go_vpmm_pool_free(p.p, C.uintptr_t(ptr), C.uintptr_t(stream), m)
	})
}

// Lookup finds the allocation containing ptr (interior pointers allowed):
// its base and size. Errors: ErrUnknownPointer.
func (p *Pool) Lookup(ptr uintptr) (base uintptr, size uint64, err error) {
	var b C.uintptr_t
	var s C.uint64_t
	err = p.call(func(m *msg) C.vpmm_status { return C.go_vpmm_pool_lookup(p.p, C.uintptr_t(ptr), &b, &s, m) })
	return uintptr(b), uint64(s), err
}

// Synchronize blocks until all work queued on stream completes. Errors:
// ErrWrongState (a held host stream), ErrBackend.
func (p *Pool) Synchronize(stream Stream) error {
	return p.call(func(m *msg) C.vpmm_status { return C.go_vpmm_pool_stream_synchronize(p.p, C.uintptr_t(stream), m) })
}

// NewStream creates a stream of the pool's backend, released with
// DestroyStream.
func (p *Pool) NewStream() (Stream, error) {
	var s C.uintptr_t
	err := p.call(func(m *msg) C.vpmm_status { return C.go_vpmm_pool_stream_create(p.p, &s, m) })
	return Stream(s), err
}

// DestroyStream retires and destroys a stream from NewStream.
func (p *Pool) DestroyStream(stream Stream) error {
	return p.call(func(m *msg) C.vpmm_status { return C.go_vpmm_pool_stream_destroy(p.p, C.uintptr_t(stream), m) })
}

// Pause pauses every live allocation with tag ("" = every tagged one):
// backs up HostBackup allocations and releases their physical memory, their
// addresses stay reserved. It reports whether anything was paused.
// Errors: ErrInvalidArgument (tag never used), ErrOutOfMemory (no host
// memory for a backup: nothing paused), ErrBackend.
func (p *Pool) Pause(tag string) (bool, error) {
	n, err := p.PauseCount(tag)
	return n > 0, err
}

// PauseCount is Pause returning how many regions were paused.
func (p *Pool) PauseCount(tag string) (uint64, error) {
	t := cstring(tag)
	defer freeString(t)
	var n C.uint64_t
	err := p.call(func(m *msg) C.vpmm_status { return C.go_vpmm_pool_pause(p.p, t, &n, m) })
	return uint64(n), err
}

// PrepareBackups pins now the host buffers a pause of tag ("" = every tag)
// would back up into, so that the first pause runs at copy speed instead of
// pinning, and returns the pinned bytes cached after the call. The pool is
// not locked while it pins, so it can run in a goroutine of its own while
// others allocate; a pause started meanwhile waits for it. Errors:
// ErrInvalidArgument (unknown tag), ErrOutOfMemory (what was pinned stays
// cached), ErrUnsupported.
func (p *Pool) PrepareBackups(tag string) (uint64, error) {
	t := cstring(tag)
	defer freeString(t)
	var n C.uint64_t
	err := p.call(func(m *msg) C.vpmm_status { return C.go_vpmm_pool_prepare_backups(p.p, t, &n, m) })
	return uint64(n), err
}

// Resume resumes paused allocations with tag ("" = all) at the same
// addresses, restoring backups, and reports whether anything was resumed.
// Errors: ErrInvalidArgument (unknown tag), ErrOutOfMemory (the rest stays
// paused), ErrBackend.
func (p *Pool) Resume(tag string) (bool, error) {
	n, err := p.ResumeCount(tag)
	return n > 0, err
}

// ResumeCount is Resume returning how many regions were resumed.
func (p *Pool) ResumeCount(tag string) (uint64, error) {
	t := cstring(tag)
	defer freeString(t)
	var n C.uint64_t
	err := p.call(func(m *msg) C.vpmm_status { return C.go_vpmm_pool_resume(p.p, t, &n, m) })
	return uint64(n), err
}

// Trim gives free cached physical memory back until at most keepBytes stay
// mapped in free regions.
func (p *Pool) Trim(keepBytes uint64) error {
	return p.call(func(m *msg) C.vpmm_status { return C.go_vpmm_pool_trim(p.p, C.uint64_t(keepBytes), m) })
}

// MarkStep tells the pool the program finished one step of its loop: Stats
// then reports the closed step's wall time and the driver time its mallocs
// and frees spent (NSteps, LastStepNs, LastStepDriverNs, StepsNs,
// StepsDriverNs). The first mark opens the first step. It changes no
// placement decision.
func (p *Pool) MarkStep() error {
	return p.call(func(m *msg) C.vpmm_status { return C.go_vpmm_pool_mark_step(p.p, m) })
}

// SetLimit changes the hard limit on mapped bytes (0 = none). Errors:
// ErrWrongState (live memory above the new limit; the old one stays).
func (p *Pool) SetLimit(bytes uint64) error {
	return p.call(func(m *msg) C.vpmm_status { return C.go_vpmm_pool_set_limit(p.p, C.uint64_t(bytes), m) })
}

// Check verifies every invariant of the pool. Errors: ErrInternal.
func (p *Pool) Check() error {
	return p.call(func(m *msg) C.vpmm_status { return C.go_vpmm_pool_check(p.p, m) })
}

// Stats is a snapshot of the pool's counters.
func (p *Pool) Stats() (Stats, error) {
	var s C.vpmm_stats
	err := p.call(func(m *msg) C.vpmm_status { return C.go_vpmm_pool_stats(p.p, &s, m) })
	return statsFromC(&s), err
}

// TagStats are the byte counts of tag ("" = all tagged allocations).
// Errors: ErrInvalidArgument (unknown tag).
func (p *Pool) TagStats(tag string) (TagStats, error) {
	t := cstring(tag)
	defer freeString(t)
	var s C.vpmm_tag_stats
	err := p.call(func(m *msg) C.vpmm_status { return C.go_vpmm_pool_tag_stats(p.p, t, &s, m) })
	return tagStatsFromC(&s), err
}

// Regions lists every region of the pool's VA in ascending order.
func (p *Pool) Regions() ([]Region, error) {
	var buf []C.vpmm_region_info
	for {
		var count C.size_t
		var first *C.vpmm_region_info
		if len(buf) > 0 {
			first = &buf[0]
		}
		err := p.call(func(m *msg) C.vpmm_status {
			return C.go_vpmm_pool_dump(p.p, first, C.size_t(len(buf)), &count, m)
		})
		if err != nil {
			return nil, err
		}
		if int(count) <= len(buf) {
			out := make([]Region, int(count))
			for i := range out {
				r := &buf[i]
				out[i] = Region{
					Kind: RegionKind(r.kind), VA: uintptr(r.va), Size: uint64(r.size),
					ChunkOffset: uint64(r.chunk_offset), Chunk: uint32(r.chunk),
					Handles: uint32(r.handles), EventPending: r.event_pending != 0,
					ID: uint64(r.id), Requested: uint64(r.requested),
					Stream: Stream(C.go_vpmm_region_stream(r)),
				}
			}
			return out, nil
		}
		buf = make([]C.vpmm_region_info, int(count)+16)
	}
}

// Reservation is bytes of a pool's capacity promised to its owner
// (vpmm_reservation). Allocations are charged to it through
// AllocAttrs.Reservation. Release it when done.
type Reservation struct {
	pool *Pool
	r    *C.vpmm_reservation
	once sync.Once
}

// ReserveFlags say what Reserve does when the bytes are not available, and
// what an allocation beyond the reservation does (VPMM_RESERVE_*).
type ReserveFlags uint32

// Reservation modes (one) and overdraft behaviours (at most one).
const (
	ReserveTry             ReserveFlags = C.VPMM_RESERVE_TRY              // fail at once with ErrOutOfMemory
	ReserveBlock           ReserveFlags = C.VPMM_RESERVE_BLOCK            // wait until releases make room
	ReserveUpTo            ReserveFlags = C.VPMM_RESERVE_UPTO             // reserve what is available, up to bytes
	ReserveOverdraftIgnore ReserveFlags = C.VPMM_RESERVE_OVERDRAFT_IGNORE // beyond it: allowed, unreserved
	ReserveOverdraftGrow   ReserveFlags = C.VPMM_RESERVE_OVERDRAFT_GROW   // beyond it: grow by 1.25x the shortfall
)

// Reserve reserves bytes of the pool's capacity (vpmm_pool_reserve). With
// ReserveBlock it waits without a timeout; ReserveContext bounds the wait.
// Errors: ErrInvalidArgument (0 bytes, bad flags), ErrOutOfMemory.
func (p *Pool) Reserve(bytes uint64, flags ReserveFlags) (*Reservation, error) {
	return p.reserve(bytes, flags, ^uint64(0))
}

// ReserveContext is Reserve with ReserveBlock semantics bounded by ctx: it
// waits until the bytes are available, ctx's deadline passes (ErrTimeout) or
// ctx is cancelled (ctx.Err()). flags may add an overdraft behaviour.
func (p *Pool) ReserveContext(ctx context.Context, bytes uint64, flags ReserveFlags) (*Reservation, error) {
	flags = flags&^(ReserveUpTo|ReserveBlock) | ReserveBlock
	// The C wait cannot be interrupted: wait in slices, checking ctx between.
	const slice = 20 * time.Millisecond
	for {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		wait := slice
		if d, ok := ctx.Deadline(); ok {
			left := time.Until(d)
			if left <= 0 {
				return nil, &Error{Status: StatusTimeout, Message: "vpmm: ReserveContext: deadline passed"}
			}
			if left < wait {
				wait = left
			}
		}
		r, err := p.reserve(bytes, flags, uint64(wait.Nanoseconds()))
		if err == nil || !errors.Is(err, ErrTimeout) {
			return r, err
		}
		if _, ok := ctx.Deadline(); ok && ctx.Err() != nil {
			return nil, err // the deadline ran out: the library's timeout error
		}
	}
}

func (p *Pool) reserve(bytes uint64, flags ReserveFlags, timeoutNs uint64) (*Reservation, error) {
	var r *C.vpmm_reservation
	err := p.callUndo(func(m *msg) C.vpmm_status {
		return C.go_vpmm_pool_reserve(p.p, C.uint64_t(bytes), C.uint32_t(flags), C.uint64_t(timeoutNs), &r, m)
	}, func() {
		var m msg
		C.go_vpmm_reservation_release(p.p, r, &m)
	})
	if err != nil {
		return nil, err
	}
	return &Reservation{pool: p, r: r}, nil
}

// Info reports the reservation's size and the bytes charged to it.
func (r *Reservation) Info() (size, used uint64, err error) {
	var s, u C.uint64_t
	err = r.pool.call(func(m *msg) C.vpmm_status { return C.go_vpmm_reservation_info(r.pool.p, r.r, &s, &u, m) })
	return uint64(s), uint64(u), err
}

// Release gives the bytes back and wakes blocked reservers; allocations
// still charged to it stay valid. Releasing twice returns nil.
func (r *Reservation) Release() error {
	var err error
	r.once.Do(func() {
		err = r.pool.call(func(m *msg) C.vpmm_status { return C.go_vpmm_reservation_release(r.pool.p, r.r, m) })
	})
	return err
}

// SetOOMCallback sets the out-of-memory callback (nil removes it): when an
// allocation or resume runs out of memory after the pool released what it
// could, f(pool, bytes) may free, pause or trim, and returns true to retry
// (at most 8 times per call). It runs on the allocating goroutine without
// the pool lock, so it may call the pool. A panic in f fails the
// allocation and is raised again by the Pool method that allocated (an
// allocation that succeeded while a pressure callback panicked is freed
// first, so nothing leaks).
func (p *Pool) SetOOMCallback(f func(p *Pool, bytes uint64) bool) error {
	if p.closed.Load() {
		return ErrClosed
	}
	c := p.cb.Value().(*callbacks)
	c.mu.Lock()
	c.oom = f
	c.mu.Unlock()
	h := C.uintptr_t(p.cb)
	if f == nil {
		h = 0
	}
	return p.call(func(m *msg) C.vpmm_status { return C.go_vpmm_pool_set_oom(p.p, h, m) })
}

// SetPressureCallback sets the pressure callback (nil removes it): called
// when mapped bytes cross the trigger watermark upward or fall to the stop
// watermark. Panics are handled as for SetOOMCallback.
func (p *Pool) SetPressureCallback(f func(p *Pool, ev Pressure)) error {
	if p.closed.Load() {
		return ErrClosed
	}
	c := p.cb.Value().(*callbacks)
	c.mu.Lock()
	c.pressure = f
	c.mu.Unlock()
	h := C.uintptr_t(p.cb)
	if f == nil {
		h = 0
	}
	return p.call(func(m *msg) C.vpmm_status { return C.go_vpmm_pool_set_pressure(p.p, h, m) })
}

// WithRegion runs f inside a thread-local allocation scope
// (vpmm_region_push/pop): allocations f makes with Malloc take tag (and
// hostBackup). The scope belongs to an OS thread, so the goroutine is locked
// to its thread while f runs; allocations made from other goroutines are not
// tagged.
func WithRegion(tag string, hostBackup bool, f func() error) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	t := cstring(tag)
	defer freeString(t)
	var flags C.uint32_t
	if hostBackup {
		flags = C.VPMM_ALLOC_HOST_BACKUP
	}
	var m msg
	if err := result(C.go_vpmm_region_push(t, flags, &m), &m); err != nil {
		return err
	}
	defer C.go_vpmm_region_pop(&m)
	return f()
}

// HostBytes is the memory of a host-backend allocation as a byte slice, for
// tests: device memory of a GPU backend must never be read this way, nor a
// paused allocation.
func HostBytes(ptr uintptr, n int) []byte {
	return unsafe.Slice((*byte)(C.go_vpmm_host_ptr(C.uintptr_t(ptr))), n)
}

// Version is the loaded library's version, e.g. "0.1.0".
func Version() string { return C.GoString(C.vpmm_version()) }

// ABIVersion is the loaded library's ABI version (the SONAME suffix).
func ABIVersion() int { return int(C.vpmm_abi_version()) }
