module vpmm

go 1.19
