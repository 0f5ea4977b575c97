package vpmm_test

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"vpmm"
)

func TestOOMCallbackPausesAndRetries(t *testing.T) {
	c := hostConfig(256)
	c.MemoryLimit = 8 * page
	p := newPool(t, c)
	scratch, err := p.MallocTagged(6*page, vpmm.DefaultStream, "scratch", false)
	must(t, err)
	var asked atomic.Uint64
	must(t, p.SetOOMCallback(func(p *vpmm.Pool, bytes uint64) bool {
		asked.Store(bytes)
		did, err := p.Pause("scratch") // calling back into the pool is allowed
		return err == nil && did
	}))
	big, err := p.Malloc(4*page, vpmm.DefaultStream)
	must(t, err)
	if asked.Load() != 4*page {
		t.Fatalf("callback asked for %d", asked.Load())
	}
	if s := stats(t, p); s.NOOMRecovered != 1 || s.PausedBytes != 6*page {
		t.Fatalf("recovered %d paused %d", s.NOOMRecovered, s.PausedBytes)
	}
	must(t, p.Free(big, vpmm.DefaultStream))
	must(t, p.SetOOMCallback(nil))
	_, err = p.Resume("scratch")
	must(t, err)
	_, err = p.Malloc(4*page, vpmm.DefaultStream)
	expectErr(t, err, vpmm.ErrOutOfMemory, "vpmm_pool_malloc")
	must(t, p.Free(scratch, vpmm.DefaultStream))
}

func TestPanickingCallbackIsRaisedByTheCaller(t *testing.T) {
	c := hostConfig(256)
	c.MemoryLimit = 4 * page
	p := newPool(t, c)
	must(t, p.SetOOMCallback(func(_ *vpmm.Pool, bytes uint64) bool {
		panic(fmt.Sprintf("no memory for %d", bytes))
	}))
	func() {
		defer func() {
			if v := recover(); v != fmt.Sprintf("no memory for %d", 8*page) {
				t.Fatalf("recovered %v", v)
			}
		}()
		_, _ = p.Malloc(8*page, vpmm.DefaultStream)
		t.Fatal("Malloc did not panic")
	}()
	must(t, p.Check())
	must(t, p.SetOOMCallback(nil))
	ptr, err := p.Malloc(2*page, vpmm.DefaultStream)
	must(t, err)
	must(t, p.Free(ptr, vpmm.DefaultStream))
}

func TestPressureCallback(t *testing.T) {
	c := hostConfig(256)
	c.MemoryLimit = 10 * page
	c.WatermarkTrigger = 0.5
	c.WatermarkStop = 0.2
	p := newPool(t, c)
	var mu sync.Mutex
	var events []vpmm.Pressure
	must(t, p.SetPressureCallback(func(_ *vpmm.Pool, ev vpmm.Pressure) {
		mu.Lock()
		events = append(events, ev)
		mu.Unlock()
	}))
	a, err := p.Malloc(6*page, vpmm.DefaultStream)
	must(t, err)
	must(t, p.Free(a, vpmm.DefaultStream))
	must(t, p.Trim(0))
	mu.Lock()
	defer mu.Unlock()
	if len(events) < 2 || !events[0].UnderPressure || events[0].MappedBytes < 5*page ||
		events[len(events)-1].UnderPressure || events[len(events)-1].MappedBytes > 2*page {
		t.Fatalf("events %+v", events)
	}
	must(t, p.SetPressureCallback(nil))
}

func TestCallbacksReplacedWhileAllocating(t *testing.T) {
	// Swapping the callback while other goroutines run into it must neither
	// crash nor race (go test -race).
	c := hostConfig(256)
	c.MemoryLimit = 4 * page
	p := newPool(t, c)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for g := 0; g < 3; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				_, _ = p.Malloc(8*page, vpmm.DefaultStream) // always OOM
			}
		}()
	}
	var calls atomic.Int64
	for i := 0; i < 50; i++ {
		must(t, p.SetOOMCallback(func(*vpmm.Pool, uint64) bool { calls.Add(1); return false }))
		must(t, p.SetOOMCallback(nil))
	}
	close(stop)
	wg.Wait()
}

func TestPanickingPressureCallbackFreesTheAllocation(t *testing.T) {
	c := hostConfig(256)
	c.MemoryLimit = 10 * page
	c.WatermarkTrigger = 0.5
	c.WatermarkStop = 0.2
	p := newPool(t, c)
	must(t, p.SetPressureCallback(func(*vpmm.Pool, vpmm.Pressure) { panic("pressure") }))
	func() {
		defer func() {
			if v := recover(); v != "pressure" {
				t.Fatalf("recovered %v", v)
			}
		}()
		_, _ = p.Malloc(6*page, vpmm.DefaultStream)
		t.Fatal("Malloc did not panic")
	}()
	must(t, p.SetPressureCallback(nil))
	must(t, p.Check())
	if s := stats(t, p); s.NLive != 0 || s.NFree != 1 {
		t.Fatalf("live %d free %d: the allocation leaked", s.NLive, s.NFree)
	}
}

func TestPanicReachesTheGoroutineWhoseCallRanTheCallback(t *testing.T) {
	// Two goroutines run out of memory on one pool at once; the callback
	// panics only for one of them. Each panic must come out of that
	// goroutine's Malloc, never the other's.
	c := hostConfig(256)
	c.MemoryLimit = 4 * page
	p := newPool(t, c)
	must(t, p.SetOOMCallback(func(_ *vpmm.Pool, bytes uint64) bool {
		if bytes == 8*page {
			panic("mine")
		}
		return false
	}))
	var wg sync.WaitGroup
	results := make(chan string, 2)
	for _, size := range []uint64{8 * page, 16 * page} {
		wg.Add(1)
		go func(size uint64) {
			defer wg.Done()
			panics := 0
			for i := 0; i < 100; i++ {
				func() {
					defer func() {
						if v := recover(); v != nil {
							panics++
						}
					}()
					_, _ = p.Malloc(size, vpmm.DefaultStream)
				}()
			}
			results <- fmt.Sprintf("%d:%d", size/page, panics)
		}(size)
	}
	wg.Wait()
	close(results)
	for r := range results {
		if r != "8:100" && r != "16:0" {
			t.Errorf("size:panics %s (want 8:100 and 16:0)", r)
		}
	}
}
