#include "runtime/cubin_comparison.h"

#include <cstdint>
#include <algorithm>
#include <cstring>
#include <optional>
#include <vector>

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/FormatVariadic.h"

namespace flashjit {

namespace {

// Sections the driver does not read and that carry the compiling process's
// working directory (see the header). Only non-loaded sections qualify: a
// section of these names with SHF_ALLOC is compared like any other.
constexpr const char *kLineTableSections[] = {".debug_line", ".rel.debug_line", ".rela.debug_line"};
constexpr uint64_t kShfAlloc = 0x2;

struct Section {
  std::string name;
  uint32_t type = 0;
  uint64_t flags = 0, addr = 0, offset = 0, size = 0;
  uint32_t link = 0, info = 0;
  uint64_t addralign = 0, entsize = 0;
  bool has_bytes = false;  // SHT_NOBITS has none in the file
};

struct Segment {
  uint32_t type = 0, flags = 0;
  uint64_t offset = 0, vaddr = 0, paddr = 0, filesz = 0, memsz = 0, align = 0;
};

struct Elf {
  llvm::ArrayRef<char> bytes;
  // e_ident, e_type, e_machine, e_version, e_entry, e_flags, e_ehsize,
  // e_phentsize, e_phnum, e_shentsize, e_shnum, e_shstrndx: everything of
  // the header but where the tables sit (e_phoff, e_shoff).
  std::vector<char> header;
  std::vector<Section> sections;
  std::vector<Segment> segments;
  uint64_t phdr_begin = 0, phdr_end = 0;  // the program header table's bytes

  llvm::ArrayRef<char> contents(uint64_t offset, uint64_t size) const {
    return bytes.slice(offset, size);
  }
};

template <typename T>
bool read(llvm::ArrayRef<char> bytes, uint64_t at, T &out) {
  if (at > bytes.size() || bytes.size() - at < sizeof(T)) return false;
  std::memcpy(&out, bytes.data() + at, sizeof(T));
  return true;
}

bool in_file(llvm::ArrayRef<char> bytes, uint64_t offset, uint64_t size) {
  return offset <= bytes.size() && size <= bytes.size() - offset;
}

// An ELF64 little-endian file, as NVRTC writes cubins; why not otherwise.
std::optional<Elf> parse(llvm::ArrayRef<char> bytes, std::string &why) {
  Elf elf;
  elf.bytes = bytes;
  if (bytes.size() < 64 || llvm::StringRef(bytes.data(), 4) != "\x7f" "ELF") {
    why = "not an ELF file";
    return std::nullopt;
  }
  if (bytes[4] != 2 || bytes[5] != 1) {
    why = "not a 64-bit little-endian ELF file";
    return std::nullopt;
  }
  uint64_t phoff = 0, shoff = 0;
  uint16_t phentsize = 0, phnum = 0, shentsize = 0, shnum = 0, shstrndx = 0;
  read(bytes, 0x20, phoff);
  read(bytes, 0x28, shoff);
  read(bytes, 0x36, phentsize);
  read(bytes, 0x38, phnum);
  read(bytes, 0x3a, shentsize);
  read(bytes, 0x3c, shnum);
  read(bytes, 0x3e, shstrndx);
  elf.header.assign(bytes.begin(), bytes.begin() + 0x20);  // e_ident .. e_entry
  elf.header.insert(elf.header.end(), bytes.begin() + 0x30, bytes.begin() + 0x40);
  if ((phnum && phentsize < 56) || (shnum && shentsize < 64) ||
      !in_file(bytes, phoff, uint64_t(phnum) * phentsize) ||
      !in_file(bytes, shoff, uint64_t(shnum) * shentsize) || (shnum && shstrndx >= shnum)) {
    why = "its program or section header table lies outside the file";
    return std::nullopt;
  }
  elf.phdr_begin = phoff;
  elf.phdr_end = phoff + uint64_t(phnum) * phentsize;
  for (uint16_t i = 0; i < phnum; ++i) {
    const uint64_t at = phoff + uint64_t(i) * phentsize;
    Segment s;
    read(bytes, at, s.type);
    read(bytes, at + 4, s.flags);
    read(bytes, at + 8, s.offset);
    read(bytes, at + 16, s.vaddr);
    read(bytes, at + 24, s.paddr);
    read(bytes, at + 32, s.filesz);
    read(bytes, at + 40, s.memsz);
    read(bytes, at + 48, s.align);
    if (!in_file(bytes, s.offset, s.filesz)) {
      why = llvm::formatv("segment {0} lies outside the file", i).str();
      return std::nullopt;
    }
    elf.segments.push_back(s);
  }
  std::vector<uint32_t> name_offsets;
  for (uint16_t i = 0; i < shnum; ++i) {
    const uint64_t at = shoff + uint64_t(i) * shentsize;
    Section s;
    uint32_t name = 0;
    read(bytes, at, name);
    read(bytes, at + 4, s.type);
    read(bytes, at + 8, s.flags);
    read(bytes, at + 16, s.addr);
    read(bytes, at + 24, s.offset);
    read(bytes, at + 32, s.size);
    read(bytes, at + 40, s.link);
    read(bytes, at + 44, s.info);
    read(bytes, at + 48, s.addralign);
    read(bytes, at + 56, s.entsize);
    constexpr uint32_t kShtNobits = 8;
    s.has_bytes = s.type != kShtNobits && s.type != 0;
    if (s.has_bytes && !in_file(bytes, s.offset, s.size)) {
      why = llvm::formatv("section {0} lies outside the file", i).str();
      return std::nullopt;
    }
    name_offsets.push_back(name);
    elf.sections.push_back(s);
  }
  if (shnum) {
    const Section &names = elf.sections[shstrndx];
    llvm::ArrayRef<char> table = names.has_bytes ? elf.contents(names.offset, names.size)
                                                 : llvm::ArrayRef<char>();
    for (size_t i = 0; i < elf.sections.size(); ++i) {
      if (name_offsets[i] >= table.size()) {
        if (name_offsets[i] != 0 || !table.empty()) {
          why = llvm::formatv("section {0}'s name lies outside the name table", i).str();
          return std::nullopt;
        }
        continue;
      }
      const char *start = table.data() + name_offsets[i];
      const size_t room = table.size() - name_offsets[i];
      elf.sections[i].name = std::string(start, strnlen(start, room));
    }
  }
  return elf;
}

bool is_line_table(const Section &s) {
  return !(s.flags & kShfAlloc) && llvm::is_contained(kLineTableSections, s.name);
}

// The first byte at which `a` and `b` differ (their common length when one
// is a prefix of the other).
size_t first_difference(llvm::ArrayRef<char> a, llvm::ArrayRef<char> b) {
  const size_t n = std::min(a.size(), b.size());
  for (size_t i = 0; i < n; ++i)
    if (a[i] != b[i]) return i;
  return n;
}

std::string section_name(const Section &s, size_t index) {
  return s.name.empty() ? llvm::formatv("section {0}", index).str() : "section " + s.name;
}

bool is_header_table(const Elf &elf, const Segment &s) {
  return s.offset >= elf.phdr_begin && s.offset + s.filesz <= elf.phdr_end;
}

bool inside(const Section &section, const Segment &segment) {
  return section.has_bytes && section.size > 0 && section.offset >= segment.offset &&
         section.offset + section.size <= segment.offset + segment.filesz;
}

// The indices of the sections whose bytes lie in `segment`.
std::vector<size_t> covered_sections(const Elf &elf, const Segment &segment) {
  std::vector<size_t> out;
  for (size_t i = 0; i < elf.sections.size(); ++i)
    if (inside(elf.sections[i], segment)) out.push_back(i);
  return out;
}

// Whether every byte of `segment` that no section holds is zero.
bool padding_is_zero(const Elf &elf, const Segment &segment) {
  std::vector<bool> held(segment.filesz, false);
  for (const Section &section : elf.sections)
    if (inside(section, segment))
      std::fill(held.begin() + (section.offset - segment.offset),
                held.begin() + (section.offset - segment.offset + section.size), true);
  llvm::ArrayRef<char> bytes = elf.contents(segment.offset, segment.filesz);
  for (size_t i = 0; i < bytes.size(); ++i)
    if (!held[i] && bytes[i] != 0) return false;
  return true;
}

}  // namespace

CubinComparison compare_cubins(llvm::ArrayRef<char> stored, llvm::ArrayRef<char> rebuilt) {
  CubinComparison out;
  if (stored == rebuilt) {
    out.same = out.identical = true;
    return out;
  }
  std::string why;
  auto a = parse(stored, why);
  if (!a) {
    out.detail = "the stored cubin is " + why;
    return out;
  }
  auto b = parse(rebuilt, why);
  if (!b) {
    out.detail = "the recompiled cubin is " + why;
    return out;
  }
  if (a->header != b->header) {
    out.detail = "the ELF headers differ";
    return out;
  }
  if (a->sections.size() != b->sections.size()) {
    out.detail = llvm::formatv("{0} sections, recompiled {1}", a->sections.size(),
                               b->sections.size());
    return out;
  }
  std::vector<std::string> left_out;
  for (size_t i = 0; i < a->sections.size(); ++i) {
    const Section &x = a->sections[i], &y = b->sections[i];
    if (x.name != y.name || x.type != y.type || x.flags != y.flags || x.addr != y.addr ||
        x.link != y.link || x.info != y.info || x.addralign != y.addralign ||
        x.entsize != y.entsize) {
      out.detail = llvm::formatv("the header of {0} differs", section_name(x, i)).str();
      return out;
    }
    if (is_line_table(x)) {
      left_out.push_back(x.name);
      continue;
    }
    const llvm::ArrayRef<char> cx = x.has_bytes ? a->contents(x.offset, x.size) : llvm::None;
    const llvm::ArrayRef<char> cy = y.has_bytes ? b->contents(y.offset, y.size) : llvm::None;
    if (x.size != y.size || cx != cy) {
      out.detail = x.size != y.size
                       ? llvm::formatv("{0} differs: {1} bytes, recompiled {2}",
                                       section_name(x, i), x.size, y.size)
                             .str()
                       : llvm::formatv("{0} differs at byte {1:x}", section_name(x, i),
                                       first_difference(cx, cy))
                             .str();
      return out;
    }
  }
  // The loaded segments. A cubin's sections all sit at address 0 and the
  // driver places each itself, so a segment is the list of sections it
  // covers (each compared in full above) with the alignment padding
  // between them, whose length follows the file offsets (a line table of
  // another length moves what follows it): its attributes but its size
  // must match, it must cover the same sections, and its padding must be
  // zeros. A segment that is the program header table itself (PT_PHDR,
  // and the PT_LOAD that maps it) holds file offsets: its entries are the
  // attributes compared here.
  if (a->segments.size() != b->segments.size()) {
    out.detail = llvm::formatv("{0} segments, recompiled {1}", a->segments.size(),
                               b->segments.size());
    return out;
  }
  for (size_t i = 0; i < a->segments.size(); ++i) {
    const Segment &x = a->segments[i], &y = b->segments[i];
    const bool attributes = x.type == y.type && x.flags == y.flags && x.vaddr == y.vaddr &&
                            x.paddr == y.paddr && x.align == y.align && x.memsz >= x.filesz &&
                            y.memsz >= y.filesz && x.memsz - x.filesz == y.memsz - y.filesz;
    const bool header_tables = is_header_table(*a, x) && is_header_table(*b, y);
    if (!attributes ||
        (!header_tables && (covered_sections(*a, x) != covered_sections(*b, y) ||
                            !padding_is_zero(*a, x) || !padding_is_zero(*b, y)))) {
      out.detail = llvm::formatv("segment {0} differs", i).str();
      return out;
    }
  }
  out.same = true;
  out.detail = left_out.empty()
                   ? "identical but for bytes outside every section and segment (padding)"
                   : "identical but for " + llvm::join(left_out, " and ") +
                         " (the line table names the compiling process's working directory)";
  return out;
}

}  // namespace flashjit
