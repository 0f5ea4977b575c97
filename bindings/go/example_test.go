package vpmm_test

import (
	"errors"
	"fmt"

	"vpmm"
)

// A pool on the host backend (no GPU needed): allocate, pause a tagged
// arena with its bytes backed up, resume it at the same address, and tell
// errors apart with errors.Is.
func Example() {
	cfg := vpmm.DefaultConfig()
	cfg.Backend = vpmm.BackendHost
	cfg.PageSize = 64 << 10
	pool, err := vpmm.NewPool(&cfg)
	if err != nil {
		panic(err)
	}
	defer pool.Close()

	weights, _ := pool.Malloc(1<<20, vpmm.DefaultStream)
	arena, _ := pool.MallocTagged(4<<20, vpmm.DefaultStream, "arena", true)

	paused, _ := pool.Pause("arena")
	st, _ := pool.Stats()
	fmt.Println("paused:", paused, "paused bytes:", st.PausedBytes)

	resumed, _ := pool.Resume("arena")
	base, _, _ := pool.Lookup(arena)
	fmt.Println("resumed:", resumed, "same address:", base == arena)

	_, err = pool.Malloc(0, vpmm.DefaultStream)
	fmt.Println("zero-size malloc is invalid:", errors.Is(err, vpmm.ErrInvalidArgument))

	_ = pool.Free(arena, vpmm.DefaultStream)
	_ = pool.Free(weights, vpmm.DefaultStream)
	// Output:
	// paused: true paused bytes: 4194304
	// resumed: true same address: true
	// zero-size malloc is invalid: true
}
