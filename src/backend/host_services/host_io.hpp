// The host's file system and memory copies, as the process's HostServices
// (host_services.cpp) performs them: backup files with direct I/O where the
// file system allows it (backup_files.cpp), copies spread over a few threads
// (host_copy.cpp). Internal to src/backend/host_services/: the pool reaches them through
// HostServices only, so that a test adaptor can fail them.
#pragma once

#include <cstdint>
#include <string>

#include "backend/host_services/host_services.hpp"

namespace vpmm {
namespace host_io {

vpmm_status dir_open(const std::string& path, DirHandle* out);
vpmm_status dir_close(DirHandle d);
vpmm_status dir_check(DirHandle d, bool* removed);
vpmm_status file_create(DirHandle dir, uint64_t size, FileRef* ref, FileHandle* out);
vpmm_status file_write(FileHandle f, const void* src, uint64_t size, uint64_t offset);
vpmm_status file_read(FileHandle f, void* dst, uint64_t size, uint64_t offset);
vpmm_status file_close(FileHandle f);
vpmm_status file_remove(const FileRef& ref, FileHandle f);
vpmm_status copy(void* dst, const void* src, uint64_t size);

}  // namespace host_io
}  // namespace vpmm
