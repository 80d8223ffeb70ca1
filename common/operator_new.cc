// The global operator new / delete of the executables that link mimalloc (CMakeLists.txt
// kiln_link_allocator adds this file to them): allocation through malloc / aligned_alloc — which
// mimalloc replaces process-wide — with the standard's failure behaviour ([new.delete.single]:
// call the new_handler until it succeeds or none is installed, then throw std::bad_alloc; the
// nothrow forms return null).
//
// Why not mimalloc's own operator new: Debian 12's libmimalloc.so.2 (2.0.9+ds-2) is built from C,
// where mimalloc's mi_try_new_handler (src/alloc.c) reads the new_handler through a weak local
// stub of std::get_new_handler that always answers null, and then calls abort() ("cannot throw in
// plain C"). The library imports no new_handler symbol (objdump -T), so a std::set_new_handler
// cannot reach it: any failed `new` aborted kilnd. Defined in the executable, these replace the
// library's (the executable comes first in symbol lookup), for every shared library too.
#include <cstdlib>
#include <new>

namespace {

void* Allocate(std::size_t size) {
  if (size == 0) size = 1;
  for (;;) {
    if (void* p = std::malloc(size)) return p;
    std::new_handler h = std::get_new_handler();
    if (h == nullptr) throw std::bad_alloc();
    h();
  }
}

void* AllocateAligned(std::size_t size, std::align_val_t al) {
  const std::size_t align = static_cast<std::size_t>(al) < sizeof(void*) ? sizeof(void*) : static_cast<std::size_t>(al);
  if (size == 0) size = 1;
  size = (size + align - 1) / align * align;  // aligned_alloc wants a multiple of the alignment
  for (;;) {
    if (void* p = std::aligned_alloc(align, size)) return p;
    std::new_handler h = std::get_new_handler();
    if (h == nullptr) throw std::bad_alloc();
    h();
  }
}

}  // namespace

void* operator new(std::size_t size) { return Allocate(size); }
void* operator new[](std::size_t size) { return Allocate(size); }
void* operator new(std::size_t size, const std::nothrow_t&) noexcept {
  try {
    return Allocate(size);
  } catch (...) {
    return nullptr;
  }
}
void* operator new[](std::size_t size, const std::nothrow_t&) noexcept {
  try {
    return Allocate(size);
  } catch (...) {
    return nullptr;
  }
}
void* operator new(std::size_t size, std::align_val_t al) { return AllocateAligned(size, al); }
void* operator new[](std::size_t size, std::align_val_t al) { return AllocateAligned(size, al); }
void* operator new(std::size_t size, std::align_val_t al, const std::nothrow_t&) noexcept {
  try {
    return AllocateAligned(size, al);
  } catch (...) {
    return nullptr;
  }
}
void* operator new[](std::size_t size, std::align_val_t al, const std::nothrow_t&) noexcept {
  try {
    return AllocateAligned(size, al);
  } catch (...) {
    return nullptr;
  }
}

void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t, const std::nothrow_t&) noexcept { std::free(p); }
