// The pickle reader of pickle.hpp: one pass over the buffer, one switch per
// opcode, following CPython's Unpickler (Lib/pickle.py and Modules/_pickle.c)
// for what each opcode does to the stack, the marks and the memo, minus
// everything that would import or call anything.
//
// The stack is one vector with the MARK positions kept beside it (Python
// keeps a stack of stacks); an opcode only sees the values above the
// innermost mark, as in Python, so `MARK APPEND` is an underflow, not an
// append to whatever lies below the mark.
#include "pickle.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <unordered_map>

namespace vpickle {

struct Arena {
  // deques: elements never move, so Values may point at them.
  std::deque<std::string> strs;
  std::deque<Seq> seqs;
  std::deque<Dict> dicts;
  std::deque<Object> objs;
  std::deque<std::vector<size_t>> dict_indexes;  // Dict::by_key
};

Document::Document() : arena_(new Arena) {}
Document::~Document() = default;
Document::Document(Document&&) noexcept = default;
Document& Document::operator=(Document&&) noexcept = default;

namespace {
const std::string kEmptyString;
const std::vector<Value> kNoItems;
const std::vector<std::pair<Value, Value>> kNoEntries;
}  // namespace

const char* kind_name(Kind k) {
  switch (k) {
    case Kind::kNone: return "None";
    case Kind::kBool: return "bool";
    case Kind::kInt: return "int";
    case Kind::kFloat: return "float";
    case Kind::kStr: return "str";
    case Kind::kBytes: return "bytes";
    case Kind::kList: return "list";
    case Kind::kTuple: return "tuple";
    case Kind::kDict: return "dict";
    case Kind::kSet: return "set";
    case Kind::kObject: return "object";
  }
  return "?";
}

std::string kind_phrase(Kind k) {
  if (k == Kind::kNone) return "None";
  const char* n = kind_name(k);
  return std::string(k == Kind::kInt || k == Kind::kObject ? "an " : "a ") + n;
}

const std::string& Value::as_str() const {
  return (kind_ == Kind::kStr || kind_ == Kind::kBytes) ? *u_.s : kEmptyString;
}

const std::vector<Value>& Value::items() const {
  return (kind_ == Kind::kList || kind_ == Kind::kTuple || kind_ == Kind::kSet) ? u_.seq->items
                                                                              : kNoItems;
}

const std::vector<std::pair<Value, Value>>& Value::entries() const {
  return kind_ == Kind::kDict ? u_.dict->entries : kNoEntries;
}

size_t Value::size() const { return kind_ == Kind::kDict ? entries().size() : items().size(); }

namespace {
const std::string& key_at(const Dict& d, size_t i) { return d.entries[i].first.as_str(); }
}  // namespace

Counts& counts() {
  thread_local Counts c;
  return c;
}

bool Value::find(const std::string& key, Value* out) const {
  if (kind_ != Kind::kDict) return false;
  const Dict& d = *u_.dict;
  const auto& e = d.entries;
  Counts& n = counts();
  ++n.finds;
  if (d.by_key && key.size() <= Dict::kIndexedKey) {
    // The last position of the key: the entry before the first greater one.
    const std::vector<size_t>& ix = *d.by_key;
    auto it = std::upper_bound(ix.begin(), ix.end(), key, [&](const std::string& k, size_t i) {
      ++n.find_compares;
      return k < key_at(d, i);
    });
    ++n.find_compares;
    if (it == ix.begin() || key_at(d, *(it - 1)) != key) return false;
    *out = e[*(it - 1)].second;
    return true;
  }
  for (size_t i = e.size(); i-- > 0;) {
    const Value& k = e[i].first;
    ++n.find_compares;
    if (k.kind_ == Kind::kStr && *k.u_.s == key) {
      *out = e[i].second;
      return true;
    }
  }
  return false;
}

const std::string& Value::object_name() const {
  return kind_ == Kind::kObject ? u_.obj->name : kEmptyString;
}

// ---------------------------------------------------------------------------
// Opcodes
// ---------------------------------------------------------------------------

namespace op {
enum : uint8_t {
  MARK = '(', STOP = '.', POP = '0', POP_MARK = '1', DUP = '2', FLOAT = 'F', INT = 'I',
  BININT = 'J', BININT1 = 'K', LONG = 'L', BININT2 = 'M', NONE = 'N', PERSID = 'P',
  BINPERSID = 'Q', REDUCE = 'R', STRING = 'S', BINSTRING = 'T', SHORT_BINSTRING = 'U',
  UNICODE = 'V', BINUNICODE = 'X', APPEND = 'a', BUILD = 'b', GLOBAL = 'c', DICT = 'd',
  EMPTY_DICT = '}', APPENDS = 'e', GET = 'g', BINGET = 'h', INST = 'i', LONG_BINGET = 'j',
  LIST = 'l', EMPTY_LIST = ']', OBJ = 'o', PUT = 'p', BINPUT = 'q', LONG_BINPUT = 'r',
  SETITEM = 's', TUPLE = 't', EMPTY_TUPLE = ')', SETITEMS = 'u', BINFLOAT = 'G',
  // protocol 2
  PROTO = 0x80, NEWOBJ = 0x81, EXT1 = 0x82, EXT2 = 0x83, EXT4 = 0x84, TUPLE1 = 0x85,
  TUPLE2 = 0x86, TUPLE3 = 0x87, NEWTRUE = 0x88, NEWFALSE = 0x89, LONG1 = 0x8a, LONG4 = 0x8b,
  // protocol 3
  BINBYTES = 'B', SHORT_BINBYTES = 'C',
  // protocol 4
  SHORT_BINUNICODE = 0x8c, BINUNICODE8 = 0x8d, BINBYTES8 = 0x8e, EMPTY_SET = 0x8f,
  ADDITEMS = 0x90, FROZENSET = 0x91, NEWOBJ_EX = 0x92, STACK_GLOBAL = 0x93, MEMOIZE = 0x94,
  FRAME = 0x95,
  // protocol 5
  BYTEARRAY8 = 0x96, NEXT_BUFFER = 0x97, READONLY_BUFFER = 0x98,
};
}  // namespace op

const char* opcode_name(uint8_t c) {
  switch (c) {
    case op::MARK: return "MARK";
    case op::STOP: return "STOP";
    case op::POP: return "POP";
    case op::POP_MARK: return "POP_MARK";
    case op::DUP: return "DUP";
    case op::FLOAT: return "FLOAT";
    case op::INT: return "INT";
    case op::BININT: return "BININT";
    case op::BININT1: return "BININT1";
    case op::LONG: return "LONG";
    case op::BININT2: return "BININT2";
    case op::NONE: return "NONE";
    case op::PERSID: return "PERSID";
    case op::BINPERSID: return "BINPERSID";
    case op::REDUCE: return "REDUCE";
    case op::STRING: return "STRING";
    case op::BINSTRING: return "BINSTRING";
    case op::SHORT_BINSTRING: return "SHORT_BINSTRING";
    case op::UNICODE: return "UNICODE";
    case op::BINUNICODE: return "BINUNICODE";
    case op::APPEND: return "APPEND";
    case op::BUILD: return "BUILD";
    case op::GLOBAL: return "GLOBAL";
    case op::DICT: return "DICT";
    case op::EMPTY_DICT: return "EMPTY_DICT";
    case op::APPENDS: return "APPENDS";
    case op::GET: return "GET";
    case op::BINGET: return "BINGET";
    case op::INST: return "INST";
    case op::LONG_BINGET: return "LONG_BINGET";
    case op::LIST: return "LIST";
    case op::EMPTY_LIST: return "EMPTY_LIST";
    case op::OBJ: return "OBJ";
    case op::PUT: return "PUT";
    case op::BINPUT: return "BINPUT";
    case op::LONG_BINPUT: return "LONG_BINPUT";
    case op::SETITEM: return "SETITEM";
    case op::TUPLE: return "TUPLE";
    case op::EMPTY_TUPLE: return "EMPTY_TUPLE";
    case op::SETITEMS: return "SETITEMS";
    case op::BINFLOAT: return "BINFLOAT";
    case op::PROTO: return "PROTO";
    case op::NEWOBJ: return "NEWOBJ";
    case op::EXT1: return "EXT1";
    case op::EXT2: return "EXT2";
    case op::EXT4: return "EXT4";
    case op::TUPLE1: return "TUPLE1";
    case op::TUPLE2: return "TUPLE2";
    case op::TUPLE3: return "TUPLE3";
    case op::NEWTRUE: return "NEWTRUE";
    case op::NEWFALSE: return "NEWFALSE";
    case op::LONG1: return "LONG1";
    case op::LONG4: return "LONG4";
    case op::BINBYTES: return "BINBYTES";
    case op::SHORT_BINBYTES: return "SHORT_BINBYTES";
    case op::SHORT_BINUNICODE: return "SHORT_BINUNICODE";
    case op::BINUNICODE8: return "BINUNICODE8";
    case op::BINBYTES8: return "BINBYTES8";
    case op::EMPTY_SET: return "EMPTY_SET";
    case op::ADDITEMS: return "ADDITEMS";
    case op::FROZENSET: return "FROZENSET";
    case op::NEWOBJ_EX: return "NEWOBJ_EX";
    case op::STACK_GLOBAL: return "STACK_GLOBAL";
    case op::MEMOIZE: return "MEMOIZE";
    case op::FRAME: return "FRAME";
    case op::BYTEARRAY8: return "BYTEARRAY8";
    case op::NEXT_BUFFER: return "NEXT_BUFFER";
    case op::READONLY_BUFFER: return "READONLY_BUFFER";
    default: return nullptr;
  }
}

// ---------------------------------------------------------------------------
// Parser
// ---------------------------------------------------------------------------

namespace {

uint64_t le(const uint8_t* p, int n) {
  uint64_t v = 0;
  for (int i = n - 1; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

void put_utf8(std::string* out, uint32_t cp) {
  if (cp < 0x80) {
    *out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    *out += static_cast<char>(0xc0 | (cp >> 6));
    *out += static_cast<char>(0x80 | (cp & 0x3f));
  } else if (cp < 0x10000) {  // surrogates too, as Python's surrogatepass writes them
    *out += static_cast<char>(0xe0 | (cp >> 12));
    *out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
    *out += static_cast<char>(0x80 | (cp & 0x3f));
  } else {
    *out += static_cast<char>(0xf0 | (cp >> 18));
    *out += static_cast<char>(0x80 | ((cp >> 12) & 0x3f));
    *out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
    *out += static_cast<char>(0x80 | (cp & 0x3f));
  }
}

int hex_digit(uint8_t c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

class Parser {
 public:
  Parser(const uint8_t* data, size_t size, const std::string& name, const Limits& limits)
      : begin_(data), p_(data), end_(data + size), name_(name), limits_(limits) {}

  bool run(Document* out, std::string* err);

 private:
  // --- errors -------------------------------------------------------------
  bool fail(const std::string& what) {
    char b[32];
    std::snprintf(b, sizeof b, "%zu", op_offset_);
    err_ = name_ + ": offset " + b + ": " + what;
    return false;
  }
  bool truncated(size_t want) {
    return fail(std::string("truncated ") + opcode_name(op_) + " (wants " + std::to_string(want) +
                " bytes, " + std::to_string(left()) + " left)");
  }

  // --- input ----------------------------------------------------------------
  size_t left() const { return static_cast<size_t>(end_ - p_); }
  // n bytes of argument, or a "truncated" failure.
  bool take(size_t n, const uint8_t** at) {
    if (left() < n) return truncated(n);
    *at = p_;
    p_ += n;
    return true;
  }
  bool take_le(int n, uint64_t* v) {
    const uint8_t* at = nullptr;
    if (!take(static_cast<size_t>(n), &at)) return false;
    *v = le(at, n);
    return true;
  }
  // A text argument up to '\n' (consumed, not included).
  bool take_line(const uint8_t** at, size_t* len) {
    const void* nl = std::memchr(p_, '\n', left());
    if (!nl) return fail(std::string("truncated ") + opcode_name(op_) + " (no end of line)");
    *at = p_;
    *len = static_cast<size_t>(static_cast<const uint8_t*>(nl) - p_);
    p_ = static_cast<const uint8_t*>(nl) + 1;
    return true;
  }

  // --- values ---------------------------------------------------------------
  static Value scalar(Kind k) {
    Value v;
    v.kind_ = k;
    return v;
  }
  static Value make_bool(bool b) {
    Value v = scalar(Kind::kBool);
    v.u_.b = b;
    return v;
  }
  static Value make_int(int64_t i) {
    Value v = scalar(Kind::kInt);
    v.u_.i = i;
    return v;
  }
  static Value make_float(double f) {
    Value v = scalar(Kind::kFloat);
    v.u_.f = f;
    return v;
  }
  Value make_str(Kind k, std::string s) {
    arena_->strs.push_back(std::move(s));
    Value v = scalar(k);
    v.u_.s = &arena_->strs.back();
    return v;
  }
  Value make_seq(Kind k, std::vector<Value> items) {
    arena_->seqs.push_back(Seq{std::move(items)});
    Value v = scalar(k);
    v.u_.seq = &arena_->seqs.back();
    return v;
  }
  Value make_dict() {
    arena_->dicts.emplace_back();
    Value v = scalar(Kind::kDict);
    v.u_.dict = &arena_->dicts.back();
    return v;
  }
  Value make_object(std::string name, bool is_class) {
    arena_->objs.emplace_back();
    Object& o = arena_->objs.back();
    o.name = std::move(name);
    o.is_class = is_class;
    Value v = scalar(Kind::kObject);
    v.u_.obj = &o;
    return v;
  }
  // What calling `callable` would have built: an opaque instance of it.
  Value instance_of(const Value& callable, const Value& args) {
    std::string n = callable.kind_ == Kind::kObject ? callable.u_.obj->name
                    : callable.kind_ == Kind::kStr  ? *callable.u_.s
                                                    : std::string("?");
    Value v = make_object(std::move(n), false);
    v.u_.obj->args = args;
    return v;
  }

  // --- stack ----------------------------------------------------------------
  size_t frame_base() const { return marks_.empty() ? 0 : marks_.back(); }
  size_t above_mark() const { return stack_.size() - frame_base(); }
  bool push(const Value& v) {
    if (stack_.size() >= limits_.max_stack)
      return fail("stack exceeds " + std::to_string(limits_.max_stack) + " values");
    stack_.push_back(v);
    return true;
  }
  bool need(size_t n) {
    if (above_mark() >= n) return true;
    return fail(std::string(opcode_name(op_)) + " needs " + std::to_string(n) + " value" +
                (n == 1 ? "" : "s") + " on the stack, " + (marks_.empty() ? "" : "above the mark, ") +
                "there " + (above_mark() == 1 ? "is " : "are ") + std::to_string(above_mark()));
  }
  Value pop() {  // after need()
    Value v = stack_.back();
    stack_.pop_back();
    return v;
  }
  // The values above the innermost mark, which is removed with them.
  bool pop_mark(std::vector<Value>* items) {
    if (marks_.empty()) return fail(std::string(opcode_name(op_)) + " without a MARK");
    size_t k = marks_.back();
    marks_.pop_back();
    if (items) items->assign(stack_.begin() + static_cast<std::ptrdiff_t>(k), stack_.end());
    stack_.resize(k);
    return true;
  }

  // --- memo -----------------------------------------------------------------
  // Dense indices (what MEMOIZE and every pickler write) live in a vector;
  // an index far beyond the keys stored so far (a hand-made PUT 4000000000,
  // or indices that each double the last) goes to a map, so the vector never
  // outgrows the number of PUTs read plus kMemoSlack.
  bool memo_put(uint64_t idx) {
    if (!need(1)) return false;
    const Value& v = stack_.back();
    if (idx < dense_.size() || idx < memo_count_ + Limits::kMemoSlack) {
      if (idx >= dense_.size()) dense_.resize(idx + 1), dense_set_.resize(idx + 1, false);
      if (!dense_set_[idx]) ++memo_count_;
      dense_[idx] = v;
      dense_set_[idx] = true;
    } else {
      auto r = sparse_.emplace(idx, v);
      if (r.second) ++memo_count_;
      else r.first->second = v;
    }
    return true;
  }
  bool memo_get(uint64_t idx) {
    if (idx < dense_.size() && dense_set_[idx]) return push(dense_[idx]);
    auto it = sparse_.find(idx);
    if (it != sparse_.end()) return push(it->second);
    return fail("memo has no value at index " + std::to_string(idx));
  }

  // --- text arguments (protocol 0) --------------------------------------------
  // A decimal integer with an optional sign (and, for LONG, a trailing L).
  // Too large for int64: an opaque "int".
  bool text_int(const uint8_t* s, size_t n, bool long_suffix) {
    if (long_suffix && n > 0 && s[n - 1] == 'L') --n;
    size_t i = 0;
    bool neg = false;
    if (i < n && (s[i] == '-' || s[i] == '+')) neg = s[i++] == '-';
    if (i == n) return fail(std::string("malformed ") + opcode_name(op_) + " argument");
    uint64_t mag = 0;
    bool big = false;
    for (; i < n; ++i) {
      if (s[i] < '0' || s[i] > '9') return fail(std::string("malformed ") + opcode_name(op_) + " argument");
      uint64_t d = static_cast<uint64_t>(s[i] - '0');
      if (mag > (UINT64_MAX - d) / 10) big = true;
      else mag = mag * 10 + d;
    }
    if (!big && mag <= uint64_t(INT64_MAX)) {
      const int64_t v = static_cast<int64_t>(mag);
      return push(make_int(neg ? -v : v));
    }
    if (!big && neg && mag == uint64_t(INT64_MAX) + 1) return push(make_int(INT64_MIN));
    return push(make_object("int", false));
  }

  // STRING's argument: a quoted Python bytes literal (Python 3 decodes it
  // with codecs.escape_decode).
  bool text_string(const uint8_t* s, size_t n) {
    if (n < 2 || s[0] != s[n - 1] || (s[0] != '\'' && s[0] != '"'))
      return fail("STRING argument is not quoted");
    std::string out;
    out.reserve(n - 2);
    for (size_t i = 1; i + 1 < n; ++i) {
      uint8_t c = s[i];
      if (c != '\\') {
        out += static_cast<char>(c);
        continue;
      }
      if (i + 2 >= n) return fail("STRING argument ends in a lone backslash");
      uint8_t e = s[++i];
      switch (e) {
        case '\n': break;  // line continuation
        case '\\': out += '\\'; break;
        case '\'': out += '\''; break;
        case '"': out += '"'; break;
        case 'a': out += '\a'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'v': out += '\v'; break;
        case 'x': {
          int hi = i + 2 < n - 1 ? hex_digit(s[i + 1]) : -1;
          int lo = i + 2 < n - 1 ? hex_digit(s[i + 2]) : -1;
          if (hi < 0 || lo < 0) return fail("STRING argument has an invalid \\x escape");
          out += static_cast<char>(hi * 16 + lo);
          i += 2;
          break;
        }
        default:
          if (e >= '0' && e <= '7') {
            int v = e - '0';
            for (int k = 0; k < 2 && i + 1 < n - 1 && s[i + 1] >= '0' && s[i + 1] <= '7'; ++k)
              v = v * 8 + (s[++i] - '0');
            out += static_cast<char>(v & 0xff);
          } else {
            out += '\\';  // unknown escapes stay as written, as escape_decode keeps them
            out += static_cast<char>(e);
          }
      }
    }
    return push(make_str(Kind::kStr, std::move(out)));
  }

  // UNICODE's argument: raw-unicode-escape (bytes are Latin-1 code points,
  // \uXXXX and \UXXXXXXXX escapes), stored as UTF-8.
  bool text_unicode(const uint8_t* s, size_t n) {
    std::string out;
    out.reserve(n);
    for (size_t i = 0; i < n;) {
      if (s[i] != '\\') {
        put_utf8(&out, s[i++]);
        continue;
      }
      // As in Python's decoder, \u is an escape only after an odd run of
      // backslashes: two backslashes and "u0041" read as two backslashes and
      // "u0041".
      size_t run = 0;
      while (i + run < n && s[i + run] == '\\') ++run;
      const size_t after = i + run;
      const bool escape = run % 2 == 1 && after < n && (s[after] == 'u' || s[after] == 'U');
      const size_t literal = escape ? run - 1 : run;
      out.append(literal, '\\');
      i += literal;
      if (!escape) continue;
      const size_t digits = s[i + 1] == 'u' ? 4 : 8;
      if (i + 2 + digits > n) return fail("UNICODE argument has a truncated \\u escape");
      uint32_t cp = 0;
      for (size_t k = 0; k < digits; ++k) {
        int d = hex_digit(s[i + 2 + k]);
        if (d < 0) return fail("UNICODE argument has a malformed \\u escape");
        cp = cp * 16 + static_cast<uint32_t>(d);
      }
      if (cp > 0x10ffff) return fail("UNICODE argument has a code point above U+10FFFF");
      put_utf8(&out, cp);
      i += 2 + digits;
    }
    return push(make_str(Kind::kStr, std::move(out)));
  }

  // --- binary arguments -------------------------------------------------------
  // LONG1/LONG4: little-endian two's complement of n bytes.
  bool binary_long(const uint8_t* b, size_t n) {
    if (n == 0) return push(make_int(0));
    bool neg = (b[n - 1] & 0x80) != 0;
    if (n > 8) {
      // Fits int64 only when every byte above the eighth is sign extension.
      uint8_t ext = neg ? 0xff : 0x00;
      bool fits = ((b[7] & 0x80) != 0) == neg;
      for (size_t k = 8; k < n && fits; ++k) fits = b[k] == ext;
      if (!fits) return push(make_object("int", false));
      n = 8;
    }
    uint64_t v = le(b, static_cast<int>(n));
    if (neg && n < 8) v |= ~uint64_t(0) << (8 * n);
    int64_t sv;
    std::memcpy(&sv, &v, sizeof sv);
    return push(make_int(sv));
  }

  // A length-prefixed str or bytes: `len_bytes` bytes of little-endian length.
  bool counted(int len_bytes, bool signed_len, Kind kind) {
    uint64_t n = 0;
    if (!take_le(len_bytes, &n)) return false;
    if (signed_len && len_bytes == 4 && (n & 0x80000000u))
      return fail(std::string(opcode_name(op_)) + " with a negative length");
    const uint8_t* at = nullptr;
    if (n > left()) return truncated(static_cast<size_t>(std::min<uint64_t>(n, SIZE_MAX)));
    if (!take(static_cast<size_t>(n), &at)) return false;
    return push(make_str(kind, std::string(reinterpret_cast<const char*>(at), static_cast<size_t>(n))));
  }

  // "module\nname\n" of GLOBAL and INST.
  bool global_name(std::string* out) {
    const uint8_t *m = nullptr, *n = nullptr;
    size_t ml = 0, nl = 0;
    if (!take_line(&m, &ml) || !take_line(&n, &nl)) return false;
    *out = std::string(reinterpret_cast<const char*>(m), ml) + "." +
           std::string(reinterpret_cast<const char*>(n), nl);
    return true;
  }

  // Appending to a list, or to an opaque object (list.extend on an object
  // that is not a list would be a method call: we only keep the items).
  bool append_to(const Value& target, const Value* items, size_t n) {
    if (target.kind_ == Kind::kList) {
      target.u_.seq->items.insert(target.u_.seq->items.end(), items, items + n);
      return true;
    }
    if (target.kind_ == Kind::kObject) {
      target.u_.obj->items.insert(target.u_.obj->items.end(), items, items + n);
      return true;
    }
    return fail(std::string(opcode_name(op_)) + " to " + kind_phrase(target.kind_) + ", not a list");
  }
  bool setitems_to(const Value& target, const Value* kv, size_t n) {
    if (n % 2) return fail(std::string(opcode_name(op_)) + " with an odd number of values");
    std::vector<std::pair<Value, Value>>* e = nullptr;
    if (target.kind_ == Kind::kDict) {
      e = &target.u_.dict->entries;
      if (e->size() <= Dict::kLinearFind && e->size() + n / 2 > Dict::kLinearFind)
        large_dicts_.push_back(target.u_.dict);
    } else if (target.kind_ == Kind::kObject) {
      e = &target.u_.obj->entries;
    } else {
      return fail(std::string(opcode_name(op_)) + " to " + kind_phrase(target.kind_) + ", not a dict");
    }
    // Growth at least doubles: an exact reserve, one SETITEM at a time,
    // would copy the whole dict for every entry.
    if (e->capacity() < e->size() + n / 2) {
      ++counts().entry_growths;
      counts().entries_moved += e->size();
      e->reserve(std::max(e->size() + n / 2, 2 * e->capacity()));
    }
    for (size_t k = 0; k < n; k += 2) e->emplace_back(kv[k], kv[k + 1]);
    return true;
  }

  // One opcode: read it, then let the group it belongs to run it.
  bool step();
  // Each group runs the opcodes it knows and answers kNotMine for others;
  // kDone and kFailed say whether the opcode's work succeeded.
  enum class Outcome { kNotMine, kDone, kFailed };
  static Outcome done(bool ok) { return ok ? Outcome::kDone : Outcome::kFailed; }
  Outcome framing();     // PROTO, FRAME, STOP, MARK, POP, POP_MARK, DUP
  Outcome scalars();     // None, bools, ints, floats
  Outcome strings();     // str and bytes, text and counted
  Outcome containers();  // lists, tuples, dicts, sets and what fills them
  Outcome memo();        // PUT, GET and their binary forms, MEMOIZE
  Outcome objects();     // globals, calls and BUILD: recorded, never run
  Outcome refused();     // persistent IDs and out-of-band buffers
  // PUT/GET's decimal argument.
  bool text_memo_index(const char* what, uint64_t* idx);

  const uint8_t* begin_;
  const uint8_t* p_;
  const uint8_t* end_;
  const std::string& name_;
  Limits limits_;
  std::unique_ptr<Arena> arena_{new Arena};
  std::vector<Value> stack_;
  std::vector<size_t> marks_;
  std::vector<Value> dense_;
  std::vector<bool> dense_set_;
  std::unordered_map<uint64_t, Value> sparse_;
  uint64_t memo_count_ = 0;  // distinct memo keys: MEMOIZE's index (Python's len(memo))
  size_t op_offset_ = 0;
  uint8_t op_ = 0;
  int protocol_ = 0;
  bool stopped_ = false;
  Value result_;
  std::vector<Value> items_;  // scratch for pop_mark
  std::vector<Dict*> large_dicts_;  // more than kLinearFind entries: to index
  std::string err_;
};

bool Parser::step() {
  op_offset_ = static_cast<size_t>(p_ - begin_);
  op_ = *p_++;
  // Direct calls, the groups of a snapshot's commonest opcodes first, so the
  // compiler can inline them into one dispatch (a loop over member pointers
  // read snapshots a quarter slower).
  Outcome r = memo();
  if (r == Outcome::kNotMine) r = strings();
  if (r == Outcome::kNotMine) r = scalars();
  if (r == Outcome::kNotMine) r = containers();
  if (r == Outcome::kNotMine) r = framing();
  if (r == Outcome::kNotMine) r = objects();
  if (r == Outcome::kNotMine) r = refused();
  if (r != Outcome::kNotMine) return r == Outcome::kDone;
  char b[8];
  std::snprintf(b, sizeof b, "0x%02x", op_);
  return fail(std::string("unknown opcode ") + b);
}

Parser::Outcome Parser::framing() {
  uint64_t n = 0;
  switch (op_) {
    case op::PROTO:
      if (!take_le(1, &n)) return Outcome::kFailed;
      if (n > 5) return done(fail("unsupported pickle protocol " + std::to_string(n)));
      protocol_ = static_cast<int>(n);
      return Outcome::kDone;
    case op::FRAME:
      // A prefetch hint: only check that the frame is really there, so that
      // a truncated file fails here rather than somewhere inside the frame.
      if (!take_le(8, &n)) return Outcome::kFailed;
      if (n > left()) return done(truncated(static_cast<size_t>(std::min<uint64_t>(n, SIZE_MAX))));
      return Outcome::kDone;
    case op::STOP:
      if (!need(1)) return Outcome::kFailed;
      result_ = pop();
      stopped_ = true;
      return Outcome::kDone;
    case op::MARK:
      if (marks_.size() >= limits_.max_marks)
        return done(fail("MARKs nested deeper than " + std::to_string(limits_.max_marks)));
      marks_.push_back(stack_.size());
      return Outcome::kDone;
    case op::POP:
      // Python pops the mark when nothing is above it.
      if (above_mark() == 0 && !marks_.empty()) return done(pop_mark(nullptr));
      if (!need(1)) return Outcome::kFailed;
      stack_.pop_back();
      return Outcome::kDone;
    case op::POP_MARK:
      return done(pop_mark(nullptr));
    case op::DUP:
      if (!need(1)) return Outcome::kFailed;
      return done(push(stack_.back()));
    default:
      return Outcome::kNotMine;
  }
}

Parser::Outcome Parser::scalars() {
  const uint8_t* at = nullptr;
  size_t len = 0;
  uint64_t n = 0;
  switch (op_) {
    case op::NONE: return done(push(Value()));
    case op::NEWTRUE: return done(push(make_bool(true)));
    case op::NEWFALSE: return done(push(make_bool(false)));
    case op::INT:
      if (!take_line(&at, &len)) return Outcome::kFailed;
      if (len == 2 && at[0] == '0' && (at[1] == '0' || at[1] == '1'))  // protocol 0's False/True
        return done(push(make_bool(at[1] == '1')));
      return done(text_int(at, len, false));
    case op::LONG:
      if (!take_line(&at, &len)) return Outcome::kFailed;
      return done(text_int(at, len, true));
    case op::BININT: {
      if (!take_le(4, &n)) return Outcome::kFailed;
      const uint32_t u = static_cast<uint32_t>(n);
      int32_t v;
      std::memcpy(&v, &u, sizeof v);  // two's complement, without relying on the cast
      return done(push(make_int(v)));
    }
    case op::BININT1:
      if (!take_le(1, &n)) return Outcome::kFailed;
      return done(push(make_int(static_cast<int64_t>(n))));
    case op::BININT2:
      if (!take_le(2, &n)) return Outcome::kFailed;
      return done(push(make_int(static_cast<int64_t>(n))));
    case op::LONG1:
      if (!take_le(1, &n)) return Outcome::kFailed;
      if (!take(static_cast<size_t>(n), &at)) return Outcome::kFailed;
      return done(binary_long(at, static_cast<size_t>(n)));
    case op::LONG4:
      if (!take_le(4, &n)) return Outcome::kFailed;
      if (n & 0x80000000u) return done(fail("LONG4 with a negative length"));
      if (!take(static_cast<size_t>(n), &at)) return Outcome::kFailed;
      return done(binary_long(at, static_cast<size_t>(n)));
    case op::FLOAT: {
      if (!take_line(&at, &len)) return Outcome::kFailed;
      std::string t(reinterpret_cast<const char*>(at), len);
      char* stop = nullptr;
      double d = std::strtod(t.c_str(), &stop);
      while (stop && *stop && (*stop == ' ' || *stop == '\r' || *stop == '\t')) ++stop;
      if (t.empty() || !stop || *stop != '\0') return done(fail("malformed FLOAT argument"));
      return done(push(make_float(d)));
    }
    case op::BINFLOAT: {
      if (!take(8, &at)) return Outcome::kFailed;
      uint64_t bits = 0;
      for (int k = 0; k < 8; ++k) bits = (bits << 8) | at[k];  // big-endian
      double d;
      std::memcpy(&d, &bits, sizeof d);
      return done(push(make_float(d)));
    }
    default:
      return Outcome::kNotMine;
  }
}

Parser::Outcome Parser::strings() {
  const uint8_t* at = nullptr;
  size_t len = 0;
  switch (op_) {
    case op::STRING:
      if (!take_line(&at, &len)) return Outcome::kFailed;
      return done(text_string(at, len));
    case op::UNICODE:
      if (!take_line(&at, &len)) return Outcome::kFailed;
      return done(text_unicode(at, len));
    case op::BINSTRING: return done(counted(4, true, Kind::kStr));
    case op::SHORT_BINSTRING: return done(counted(1, false, Kind::kStr));
    case op::BINUNICODE: return done(counted(4, false, Kind::kStr));
    case op::SHORT_BINUNICODE: return done(counted(1, false, Kind::kStr));
    case op::BINUNICODE8: return done(counted(8, false, Kind::kStr));
    case op::BINBYTES: return done(counted(4, false, Kind::kBytes));
    case op::SHORT_BINBYTES: return done(counted(1, false, Kind::kBytes));
    case op::BINBYTES8: return done(counted(8, false, Kind::kBytes));
    case op::BYTEARRAY8: return done(counted(8, false, Kind::kBytes));
    default:
      return Outcome::kNotMine;
  }
}

Parser::Outcome Parser::containers() {
  switch (op_) {
    case op::EMPTY_LIST: return done(push(make_seq(Kind::kList, {})));
    case op::EMPTY_TUPLE: return done(push(make_seq(Kind::kTuple, {})));
    case op::EMPTY_DICT: return done(push(make_dict()));
    case op::EMPTY_SET: return done(push(make_seq(Kind::kSet, {})));
    case op::LIST:
    case op::TUPLE:
    case op::FROZENSET:
      if (!pop_mark(&items_)) return Outcome::kFailed;
      return done(push(make_seq(op_ == op::LIST ? Kind::kList : op_ == op::TUPLE ? Kind::kTuple : Kind::kSet,
                                std::move(items_))));
    case op::TUPLE1:
    case op::TUPLE2:
    case op::TUPLE3: {
      size_t k = static_cast<size_t>(op_ - op::TUPLE1 + 1);
      if (!need(k)) return Outcome::kFailed;
      std::vector<Value> t(stack_.end() - static_cast<std::ptrdiff_t>(k), stack_.end());
      stack_.resize(stack_.size() - k);
      return done(push(make_seq(Kind::kTuple, std::move(t))));
    }
    case op::DICT: {
      if (!pop_mark(&items_)) return Outcome::kFailed;
      Value d = make_dict();
      if (!setitems_to(d, items_.data(), items_.size())) return Outcome::kFailed;
      return done(push(d));
    }
    case op::APPEND: {
      if (!need(2)) return Outcome::kFailed;
      Value v = pop();
      return done(append_to(stack_.back(), &v, 1));
    }
    case op::APPENDS:
      if (!pop_mark(&items_)) return Outcome::kFailed;
      if (!need(1)) return Outcome::kFailed;
      return done(append_to(stack_.back(), items_.data(), items_.size()));
    case op::SETITEM: {
      if (!need(3)) return Outcome::kFailed;
      Value kv[2];
      kv[1] = pop();
      kv[0] = pop();
      return done(setitems_to(stack_.back(), kv, 2));
    }
    case op::SETITEMS:
      if (!pop_mark(&items_)) return Outcome::kFailed;
      if (!need(1)) return Outcome::kFailed;
      return done(setitems_to(stack_.back(), items_.data(), items_.size()));
    case op::ADDITEMS: {
      if (!pop_mark(&items_)) return Outcome::kFailed;
      if (!need(1)) return Outcome::kFailed;
      const Value& s = stack_.back();
      if (s.kind_ == Kind::kSet) {
        s.u_.seq->items.insert(s.u_.seq->items.end(), items_.begin(), items_.end());
        return Outcome::kDone;
      }
      if (s.kind_ == Kind::kObject) {
        s.u_.obj->items.insert(s.u_.obj->items.end(), items_.begin(), items_.end());
        return Outcome::kDone;
      }
      return done(fail("ADDITEMS to " + kind_phrase(s.kind_) + ", not a set"));
    }
    default:
      return Outcome::kNotMine;
  }
}

bool Parser::text_memo_index(const char* what, uint64_t* idx) {
  const uint8_t* at = nullptr;
  size_t len = 0;
  if (!take_line(&at, &len)) return false;
  *idx = 0;
  if (len == 0 || len > 19) return fail(std::string("malformed ") + what + " argument");
  for (size_t k = 0; k < len; ++k) {
    if (at[k] < '0' || at[k] > '9') return fail(std::string("malformed ") + what + " argument");
    *idx = *idx * 10 + (at[k] - '0');
  }
  return true;
}

Parser::Outcome Parser::memo() {
  uint64_t n = 0;
  switch (op_) {
    case op::PUT:
      if (!text_memo_index("PUT", &n)) return Outcome::kFailed;
      return done(memo_put(n));
    case op::BINPUT:
      if (!take_le(1, &n)) return Outcome::kFailed;
      return done(memo_put(n));
    case op::LONG_BINPUT:
      if (!take_le(4, &n)) return Outcome::kFailed;
      return done(memo_put(n));
    case op::MEMOIZE:
      return done(memo_put(memo_count_));
    case op::GET:
      if (!text_memo_index("GET", &n)) return Outcome::kFailed;
      return done(memo_get(n));
    case op::BINGET:
      if (!take_le(1, &n)) return Outcome::kFailed;
      return done(memo_get(n));
    case op::LONG_BINGET:
      if (!take_le(4, &n)) return Outcome::kFailed;
      return done(memo_get(n));
    default:
      return Outcome::kNotMine;
  }
}

Parser::Outcome Parser::objects() {
  switch (op_) {
    case op::GLOBAL: {
      std::string g;
      if (!global_name(&g)) return Outcome::kFailed;
      return done(push(make_object(std::move(g), true)));
    }
    case op::STACK_GLOBAL: {
      if (!need(2)) return Outcome::kFailed;
      Value name = pop(), module = pop();
      if (name.kind_ != Kind::kStr || module.kind_ != Kind::kStr)
        return done(fail("STACK_GLOBAL wants two str, got " + kind_phrase(module.kind_) + " and " +
                         kind_phrase(name.kind_)));
      return done(push(make_object(*module.u_.s + "." + *name.u_.s, true)));
    }
    case op::REDUCE:
    case op::NEWOBJ: {
      if (!need(2)) return Outcome::kFailed;
      Value args = pop();
      Value callable = pop();
      return done(push(instance_of(callable, args)));
    }
    case op::NEWOBJ_EX: {
      if (!need(3)) return Outcome::kFailed;
      pop();  // kwargs
      Value args = pop();
      Value cls = pop();
      return done(push(instance_of(cls, args)));
    }
    case op::INST: {
      std::string g;
      if (!global_name(&g)) return Outcome::kFailed;
      if (!pop_mark(&items_)) return Outcome::kFailed;
      Value v = make_object(std::move(g), false);
      v.u_.obj->args = make_seq(Kind::kTuple, std::move(items_));
      return done(push(v));
    }
    case op::OBJ: {
      if (!pop_mark(&items_)) return Outcome::kFailed;
      if (items_.empty()) return done(fail("OBJ without a class"));
      Value cls = items_.front();
      std::vector<Value> args(items_.begin() + 1, items_.end());
      return done(push(instance_of(cls, make_seq(Kind::kTuple, std::move(args)))));
    }
    case op::BUILD: {
      if (!need(2)) return Outcome::kFailed;
      Value state = pop();
      const Value& target = stack_.back();
      // __setstate__ on a container would be a method call Python itself
      // refuses for plain containers; on an opaque object keep the state.
      if (target.kind_ != Kind::kObject) return done(fail("BUILD on " + kind_phrase(target.kind_)));
      target.u_.obj->state = state;
      return Outcome::kDone;
    }
    case op::EXT1:
    case op::EXT2:
    case op::EXT4: {
      uint64_t n = 0;
      int w = op_ == op::EXT1 ? 1 : op_ == op::EXT2 ? 2 : 4;
      if (!take_le(w, &n)) return Outcome::kFailed;
      return done(push(make_object("ext:" + std::to_string(n), true)));
    }
    default:
      return Outcome::kNotMine;
  }
}

// What plain data never needs.
Parser::Outcome Parser::refused() {
  switch (op_) {
    case op::PERSID:
    case op::BINPERSID:
      return done(fail(std::string(opcode_name(op_)) +
                       ": persistent IDs are not supported (a torch.save file, not a memory snapshot?)"));
    case op::NEXT_BUFFER:
    case op::READONLY_BUFFER:
      return done(fail(std::string(opcode_name(op_)) + ": out-of-band buffers are not supported"));
    default:
      return Outcome::kNotMine;
  }
}

bool Parser::run(Document* out, std::string* err) {
  bool ok = true;
  while (ok && !stopped_) {
    if (p_ == end_) {
      op_offset_ = static_cast<size_t>(p_ - begin_);
      ok = fail(begin_ == end_ ? "empty input: no pickle" : "truncated pickle: no STOP opcode");
      break;
    }
    ok = step();
  }
  if (!ok) {
    if (err) *err = err_;
    return false;
  }
  for (Dict* large : large_dicts_) {
    const Dict& dict = *large;
    arena_->dict_indexes.emplace_back();
    std::vector<size_t>& ix = arena_->dict_indexes.back();
    for (size_t i = 0; i < dict.entries.size(); ++i)
      if (dict.entries[i].first.kind_ == Kind::kStr && key_at(dict, i).size() <= Dict::kIndexedKey)
        ix.push_back(i);
    std::stable_sort(ix.begin(), ix.end(),
                     [&](size_t a, size_t b) { return key_at(dict, a) < key_at(dict, b); });
    large->by_key = &ix;
  }
  Document d;
  d.arena_ = std::move(arena_);
  d.root_ = result_;
  d.consumed_ = static_cast<size_t>(p_ - begin_);
  d.protocol_ = protocol_;
  *out = std::move(d);
  return true;
}

bool parse(const uint8_t* data, size_t size, const std::string& name, Document* out,
           std::string* err, const Limits& limits) {
  static const uint8_t kNothing = 0;
  Parser p(data ? data : &kNothing, data ? size : 0, name, limits);
  return p.run(out, err);
}

// ---------------------------------------------------------------------------
// describe
// ---------------------------------------------------------------------------

namespace {

void quote(std::string* out, const std::string& s, char prefix) {
  if (prefix) *out += prefix;
  *out += '\'';
  for (unsigned char c : s) {
    if (c == '\'' || c == '\\') {
      *out += '\\';
      *out += static_cast<char>(c);
    } else if (c < 0x20 || c == 0x7f || (prefix && c >= 0x80)) {
      char b[8];
      std::snprintf(b, sizeof b, "\\x%02x", c);
      *out += b;
    } else {
      *out += static_cast<char>(c);
    }
  }
  *out += '\'';
}

void describe_into(std::string* out, const Value& v, int depth, size_t max_items) {
  switch (v.kind()) {
    case Kind::kNone: *out += "None"; return;
    case Kind::kBool: *out += v.as_bool() ? "True" : "False"; return;
    case Kind::kInt: *out += std::to_string(v.as_int()); return;
    case Kind::kFloat: {
      char b[40];
      std::snprintf(b, sizeof b, "%.17g", v.as_float());
      std::string s = b;
      if (std::isfinite(v.as_float()) && s.find_first_of(".en") == std::string::npos) s += ".0";
      *out += s;
      return;
    }
    case Kind::kStr: quote(out, v.as_str(), 0); return;
    case Kind::kBytes: quote(out, v.as_str(), 'b'); return;
    case Kind::kObject: *out += "<" + v.object_name() + ">"; return;
    default: break;
  }
  const bool dict = v.is(Kind::kDict);
  const char* open = dict ? "{" : v.is(Kind::kList) ? "[" : v.is(Kind::kTuple) ? "(" : "{";
  const char* close = dict ? "}" : v.is(Kind::kList) ? "]" : v.is(Kind::kTuple) ? ")" : "}";
  if (v.is(Kind::kSet) && v.size() == 0) {
    *out += "set()";
    return;
  }
  *out += open;
  if (depth <= 0 && v.size() > 0) {
    *out += "...";
  } else {
    size_t n = v.size();
    for (size_t i = 0; i < n; ++i) {
      if (i) *out += ", ";
      if (i == max_items) {
        *out += "...";
        break;
      }
      if (dict) {
        describe_into(out, v.entries()[i].first, depth - 1, max_items);
        *out += ": ";
        describe_into(out, v.entries()[i].second, depth - 1, max_items);
      } else {
        describe_into(out, v.items()[i], depth - 1, max_items);
      }
    }
    if (v.is(Kind::kTuple) && n == 1) *out += ",";
  }
  *out += close;
}

}  // namespace

std::string describe(const Value& v, int max_depth, size_t max_items) {
  std::string out;
  describe_into(&out, v, std::min(std::max(max_depth, 0), 64), max_items);
  return out;
}

}  // namespace vpickle
