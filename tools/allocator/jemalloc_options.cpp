// jemalloc's options for fleetsim's programs, read at its first allocation through its
// documented `malloc_conf` global (the MALLOC_CONF environment variable still overrides them).
//
// A large step makes and drops a few hundred megabytes of small objects (tasks, links, flows,
// routes) in one go. With 4 KiB pages a third of a 16,384-GPU step's time went to page faults
// zeroing fresh pages; transparent huge pages for jemalloc's extents and metadata take 512
// times fewer. Where the kernel offers none (transparent_hugepage set to never) these options
// change nothing.
#include <jemalloc/jemalloc.h>

const char* malloc_conf = "thp:always,metadata_thp:always";
