package main

import "fmt"
import "vpmm"

func main() {
	cfg := vpmm.ConfigFromEnv() // defaults + VPMM_*; CUDA if a GPU is usable, else host
	pool, err := vpmm.NewPool(&cfg)
	if err != nil {
		panic(err) // a *vpmm.Error: its Status and the library's sentence
	}
	defer pool.Close()
	w, _ := pool.MallocTagged(256<<20, vpmm.DefaultStream, "weights", true)
	pool.Pause("weights")  // memory released, bytes kept on the host
	pool.Resume("weights") // same address, same bytes
	st, _ := pool.Stats()
	fmt.Printf("%#x: %d bytes mapped\n", w, st.MappedBytes)
}
