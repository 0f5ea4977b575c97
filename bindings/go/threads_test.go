package vpmm_test

import (
	"bytes"
	"fmt"
	"sync"
	"testing"

	"vpmm"
)

func TestConcurrentAllocations(t *testing.T) {
	p := newPool(t, hostConfig(256))
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			hs, err := vpmm.NewHostStream()
			if err != nil {
				errs <- err
				return
			}
			defer hs.Close()
			for i := 0; i < 40; i++ {
				size := (1+(i+g)%3)*page/2 + 100
				ptr, err := p.Malloc(uint64(size), hs.Stream())
				if err != nil {
					errs <- err
					return
				}
				want := pattern(byte(g+i), size)
				copy(vpmm.HostBytes(ptr, size), want)
				if !bytes.Equal(vpmm.HostBytes(ptr, size), want) {
					errs <- fmt.Errorf("goroutine %d: bytes differ", g)
					return
				}
				if err := p.Free(ptr, hs.Stream()); err != nil {
					errs <- err
					return
				}
				if i%10 == 0 {
					if err := p.Check(); err != nil {
						errs <- err
						return
					}
				}
			}
			errs <- hs.Synchronize()
		}(g)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		must(t, err)
	}
	s := stats(t, p)
	if s.NLive != 0 || s.NMalloc != 160 || s.NFree != 160 {
		t.Fatalf("live %d malloc %d free %d", s.NLive, s.NMalloc, s.NFree)
	}
	must(t, p.Check())
}

func TestConcurrentPauseResume(t *testing.T) {
	p := newPool(t, hostConfig(256))
	var wg sync.WaitGroup
	errs := make(chan error, 3)
	for g := 0; g < 3; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			tag := fmt.Sprintf("worker%d", g)
			for i := 0; i < 20; i++ {
				ptr, err := p.MallocTagged(page, vpmm.DefaultStream, tag, true)
				if err != nil {
					errs <- err
					return
				}
				copy(vpmm.HostBytes(ptr, page), pattern(byte(g), page))
				if _, err := p.Pause(tag); err != nil {
					errs <- err
					return
				}
				if did, err := p.Resume(tag); err != nil || !did {
					errs <- fmt.Errorf("resume %s: %v %v", tag, did, err)
					return
				}
				if !bytes.Equal(vpmm.HostBytes(ptr, page), pattern(byte(g), page)) {
					errs <- fmt.Errorf("%s: bytes differ after resume", tag)
					return
				}
				if err := p.Free(ptr, vpmm.DefaultStream); err != nil {
					errs <- err
					return
				}
			}
		}(g)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		must(t, err)
	}
	must(t, p.Check())
}
