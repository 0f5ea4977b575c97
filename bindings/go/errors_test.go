package vpmm_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"vpmm"
)

// expectErr checks the status, errors.Is with the sentinel, errors.As, and
// that the library's message (naming the call) survived the cgo boundary.
func expectErr(t *testing.T, err error, sentinel *vpmm.Error, inMessage string) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error, want %v", sentinel.Status)
	}
	if !errors.Is(err, sentinel) {
		t.Fatalf("errors.Is(%v, %v) is false", err, sentinel.Status)
	}
	var ve *vpmm.Error
	if !errors.As(err, &ve) || ve.Status != sentinel.Status {
		t.Fatalf("errors.As: %#v", err)
	}
	if ve.Message == "" || !strings.Contains(ve.Message, inMessage) {
		t.Fatalf("message %q lacks %q", ve.Message, inMessage)
	}
	if !strings.Contains(err.Error(), sentinel.Status.String()) {
		t.Fatalf("Error() %q lacks the status name", err.Error())
	}
}

func TestStatusNamesAndSentinels(t *testing.T) {
	all := []struct {
		err  *vpmm.Error
		name string
	}{
		{vpmm.ErrInvalidArgument, "VPMM_ERR_INVALID_ARGUMENT"},
		{vpmm.ErrOutOfMemory, "VPMM_ERR_OUT_OF_MEMORY"},
		{vpmm.ErrUnknownPointer, "VPMM_ERR_UNKNOWN_POINTER"},
		{vpmm.ErrWrongState, "VPMM_ERR_WRONG_STATE"},
		{vpmm.ErrUnsupported, "VPMM_ERR_UNSUPPORTED"},
		{vpmm.ErrBackend, "VPMM_ERR_BACKEND"},
		{vpmm.ErrInternal, "VPMM_ERR_INTERNAL"},
		{vpmm.ErrTimeout, "VPMM_ERR_TIMEOUT"},
	}
	for i, c := range all {
		if c.err.Status.String() != c.name || int(c.err.Status) != i+1 {
			t.Errorf("%d: %s is %d", i+1, c.err.Status, int(c.err.Status))
		}
		// A message does not stop errors.Is; another status does.
		withMsg := &vpmm.Error{Status: c.err.Status, Message: "m"}
		if !errors.Is(withMsg, c.err) {
			t.Errorf("errors.Is(%s with message) is false", c.name)
		}
		other := all[(i+1)%len(all)].err
		if errors.Is(withMsg, other) {
			t.Errorf("%s matches %s", c.name, other.Status)
		}
	}
	if vpmm.Status(42).String() != "VPMM_ERR_UNKNOWN" {
		t.Error(vpmm.Status(42).String())
	}
}

func TestInvalidArgument(t *testing.T) {
	p := newPool(t, hostConfig(256))
	_, err := p.Malloc(0, vpmm.DefaultStream)
	expectErr(t, err, vpmm.ErrInvalidArgument, "vpmm_pool_malloc")
	_, err = p.MallocTagged(page, vpmm.DefaultStream, strings.Repeat("t", 64), false)
	expectErr(t, err, vpmm.ErrInvalidArgument, "vpmm_pool_malloc_ex")
	_, err = p.TagStats("never-used")
	expectErr(t, err, vpmm.ErrInvalidArgument, "never-used")
	_, err = p.Pause("never-used")
	expectErr(t, err, vpmm.ErrInvalidArgument, "never-used")
	_, err = p.Reserve(0, vpmm.ReserveTry)
	expectErr(t, err, vpmm.ErrInvalidArgument, "vpmm_pool_reserve")
	c := hostConfig(64)
	c.PageSize = 1000
	_, err = vpmm.NewPool(&c)
	expectErr(t, err, vpmm.ErrInvalidArgument, "page")
	err = vpmm.WithRegion(strings.Repeat("t", 64), false, func() error { return nil })
	expectErr(t, err, vpmm.ErrInvalidArgument, "vpmm_region_push")
}

func TestMalformedEnvironmentVariable(t *testing.T) {
	os.Setenv("VPMM_PAGE_SIZE", "twelve")
	c := vpmm.ConfigFromEnv()
	os.Unsetenv("VPMM_PAGE_SIZE")
	c.Backend = vpmm.BackendHost
	_, err := vpmm.NewPool(&c)
	expectErr(t, err, vpmm.ErrInvalidArgument, "VPMM_PAGE_SIZE")
	d := vpmm.DefaultConfig()
	d.Backend = vpmm.BackendHost
	p, err := vpmm.NewPool(&d)
	must(t, err)
	must(t, p.Close())
}

func TestOutOfMemory(t *testing.T) {
	c := hostConfig(256)
	c.MemoryLimit = 8 * page
	p := newPool(t, c)
	a, err := p.Malloc(6*page, vpmm.DefaultStream)
	must(t, err)
	_, err = p.Malloc(4*page, vpmm.DefaultStream)
	expectErr(t, err, vpmm.ErrOutOfMemory, "vpmm_pool_malloc")
	_, err = p.Reserve(4*page, vpmm.ReserveTry)
	expectErr(t, err, vpmm.ErrOutOfMemory, "vpmm_pool_reserve")
	if s := stats(t, p); s.NOOM != 1 {
		t.Errorf("n_oom %d", s.NOOM)
	}
	must(t, p.Free(a, vpmm.DefaultStream))
}

func TestUnknownPointer(t *testing.T) {
	p := newPool(t, hostConfig(256))
	buf, err := p.Malloc(2*page, vpmm.DefaultStream)
	must(t, err)
	_, _, err = p.Lookup(0x1000)
	expectErr(t, err, vpmm.ErrUnknownPointer, "vpmm_pool_lookup")
	expectErr(t, p.Free(buf+64, vpmm.DefaultStream), vpmm.ErrUnknownPointer, "vpmm_pool_free")
	must(t, p.Free(buf, vpmm.DefaultStream))
	expectErr(t, p.Free(buf, vpmm.DefaultStream), vpmm.ErrUnknownPointer, "vpmm_pool_free")
}

func TestWrongState(t *testing.T) {
	p := newPool(t, hostConfig(256))
	a, err := p.Malloc(8*page, vpmm.DefaultStream)
	must(t, err)
	expectErr(t, p.SetLimit(2*page), vpmm.ErrWrongState, "vpmm_pool_set_limit")
	must(t, p.SetLimit(16*page))
	hs, err := vpmm.NewHostStream()
	must(t, err)
	must(t, hs.Hold())
	expectErr(t, hs.Synchronize(), vpmm.ErrWrongState, "")
	expectErr(t, p.Synchronize(hs.Stream()), vpmm.ErrWrongState, "")
	must(t, hs.Release())
	expectErr(t, hs.Release(), vpmm.ErrWrongState, "")
	must(t, hs.Close())
	must(t, p.Free(a, vpmm.DefaultStream))
}

func TestUnsupportedBackend(t *testing.T) {
	// No HIP backend is built on the CPU-only machines that run these tests.
	c := vpmm.DefaultConfig()
	c.Backend = vpmm.BackendHIP
	_, err := vpmm.NewPool(&c)
	expectErr(t, err, vpmm.ErrUnsupported, "")
}

func TestTimeoutAndContext(t *testing.T) {
	c := hostConfig(256)
	c.MemoryLimit = 8 * page
	p := newPool(t, c)
	held, err := p.Reserve(8*page, vpmm.ReserveTry)
	must(t, err)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = p.ReserveContext(ctx, page, 0)
	expectErr(t, err, vpmm.ErrTimeout, "")
	if time.Since(start) < 25*time.Millisecond {
		t.Errorf("timed out after %v", time.Since(start))
	}

	ctx2, cancel2 := context.WithCancel(context.Background())
	go func() { time.Sleep(30 * time.Millisecond); cancel2() }()
	if _, err := p.ReserveContext(ctx2, page, 0); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled wait: %v", err)
	}

	// A release during the wait lets it succeed.
	go func() { time.Sleep(30 * time.Millisecond); _ = held.Release() }()
	r, err := p.ReserveContext(context.Background(), page, 0)
	must(t, err)
	size, used, err := r.Info()
	must(t, err)
	if size != page || used != 0 {
		t.Fatalf("reservation %d/%d", size, used)
	}
	must(t, r.Release())
	must(t, r.Release()) // twice is fine
}

func TestMessagesSurviveThreadSwitches(t *testing.T) {
	// Many goroutines fail different calls at once; every error carries the
	// message of its own call even though the Go scheduler moves goroutines
	// between OS threads between cgo calls.
	p := newPool(t, hostConfig(256))
	done := make(chan error)
	for g := 0; g < 8; g++ {
		go func(g int) {
			for i := 0; i < 200; i++ {
				var err error
				var want string
				if g%2 == 0 {
					_, err = p.Malloc(0, vpmm.DefaultStream)
					want = "vpmm_pool_malloc"
				} else {
					_, _, err = p.Lookup(0x1000)
					want = "vpmm_pool_lookup"
				}
				var ve *vpmm.Error
				if !errors.As(err, &ve) || !strings.Contains(ve.Message, want) {
					done <- err
					return
				}
			}
			done <- nil
		}(g)
	}
	for g := 0; g < 8; g++ {
		if err := <-done; err != nil {
			t.Fatalf("wrong message: %v", err)
		}
	}
}
