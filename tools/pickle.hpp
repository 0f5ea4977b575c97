// A small, safe reader of Python pickles (protocols 0-5) holding plain data:
// None, bool, int, float, str, bytes, list, tuple, dict, set. It exists so
// that `vpmm replay` can read a PyTorch memory snapshot (snapshot.hpp)
// without Python or torch.
//
// Safety: the reader is a stack machine over an untrusted buffer. Every read
// is checked against the end of the input, the stack and the MARK nesting are
// capped, unknown opcodes are rejected, and nothing is ever executed: GLOBAL,
// STACK_GLOBAL, REDUCE, BUILD, NEWOBJ, NEWOBJ_EX, INST, OBJ and EXT* build an
// opaque Kind::kObject value that only records the name of the class or
// callable (so an enum or a custom class in a field nobody reads still
// parses). Failures are returned as "NAME: offset N: what" (N is the offset of
// the opcode that failed), never thrown.
//
// Memory model: every container lives in an arena owned by the Document and
// a Value is a 16-byte handle (scalars inline, containers by pointer). Memo
// GET therefore shares a container instead of copying it, exactly as Python
// does, which matters for snapshots of 100 MB and more; and a pickle whose
// containers refer to themselves (legal: l = []; l.append(l)) cannot leak, as
// it would with reference counting. A Value is valid as long as the Document
// that produced it. Containers may be cyclic and arbitrarily deep: code that
// walks a Value generically must bound its depth (describe() does).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace vpickle {

enum class Kind : uint8_t {
  kNone,
  kBool,
  kInt,     // fits int64; a Python int beyond that is a kObject named "int"
  kFloat,
  kStr,     // str, and protocol 0-2 byte strings (STRING/BINSTRING), as Python 3 reads them
  kBytes,   // bytes and bytearray
  kList,
  kTuple,
  kDict,
  kSet,     // set and frozenset
  kObject,  // anything built by a class or a callable: opaque
};

// "None", "bool", "int", "float", "str", "bytes", "list", "tuple", "dict",
// "set", "object".
const char* kind_name(Kind k);
// The same for messages: "None", "a bool", "an int", "a str", "an object"...
std::string kind_phrase(Kind k);

struct Seq;
struct Dict;
struct Object;

class Value {
 public:
  Value() = default;  // None

  Kind kind() const { return kind_; }
  bool is(Kind k) const { return kind_ == k; }

  // Scalars: the value when the kind matches, else false / 0 / 0.0.
  bool as_bool() const { return kind_ == Kind::kBool && u_.b; }
  int64_t as_int() const { return kind_ == Kind::kInt ? u_.i : 0; }
  double as_float() const { return kind_ == Kind::kFloat ? u_.f : 0.0; }
  // The bytes of a str (UTF-8 as pickled; not validated) or bytes; "" else.
  const std::string& as_str() const;

  // Items of a list, tuple or set (in pickle order); empty for anything else.
  const std::vector<Value>& items() const;
  // Entries of a dict in insertion order; empty for anything else. A key
  // set twice appears twice here (find() returns the later one, as Python's
  // dict would hold it): de-duplicating every insert would cost a hash of
  // every key of a 100 MB snapshot for nothing.
  const std::vector<std::pair<Value, Value>>& entries() const;
  // items().size() or entries().size().
  size_t size() const;

  // Dict lookup by a str key; false when this is not a dict or the key is
  // absent. The last entry with the key wins. O(log n) for a key of at most
  // Dict::kIndexedKey bytes, linear in the dict's size for a longer one.
  bool find(const std::string& key, Value* out) const;

  // For kObject: "module.name" of the class or callable, or "int" for an
  // integer too large for int64, or "ext:CODE" for an extension code.
  const std::string& object_name() const;
  // The parts of a kObject (below); nullptr for anything else.
  const struct Object* object() const { return kind_ == Kind::kObject ? u_.obj : nullptr; }

 private:
  friend class Parser;
  Kind kind_ = Kind::kNone;
  union {
    bool b;
    int64_t i;
    double f;
    const std::string* s;
    Seq* seq;
    Dict* dict;
    Object* obj;
  } u_{};
};

struct Seq {
  std::vector<Value> items;
};
struct Dict {
  std::vector<std::pair<Value, Value>> entries;
  // Filled by parse() for a dict of more than kLinearFind entries: the
  // positions of its str keys of at most kIndexedKey bytes, sorted by key,
  // then position. A pickle may list one large dict as every event of a
  // snapshot, so find() must not cost the dict's size. Sorted rather than
  // hashed: keys chosen to collide cannot degrade it; short keys only: a
  // sort of long keys that differ in their last byte would cost their
  // length per comparison.
  // Owned by the Document; a pointer keeps the millions of small dicts of a
  // snapshot small.
  const std::vector<size_t>* by_key = nullptr;
  static constexpr size_t kLinearFind = 16;
  static constexpr size_t kIndexedKey = 64;
};
// What a class or a callable would have built. Nothing is executed; the
// parts are kept for inspection: `args` (REDUCE/NEWOBJ arguments), `state`
// (BUILD), and items/entries that APPEND(S)/SETITEM(S) added to it (e.g. an
// OrderedDict's contents).
struct Object {
  std::string name;
  bool is_class = false;  // GLOBAL/STACK_GLOBAL: the class or callable itself
  Value args, state;
  std::vector<Value> items;
  std::vector<std::pair<Value, Value>> entries;
};

struct Arena;

class Document {
 public:
  Document();
  ~Document();
  Document(Document&&) noexcept;
  Document& operator=(Document&&) noexcept;
  Document(const Document&) = delete;
  Document& operator=(const Document&) = delete;

  const Value& root() const { return root_; }
  // Bytes read up to and including STOP (anything after it is ignored, as
  // pickle.load ignores it).
  size_t consumed() const { return consumed_; }
  int protocol() const { return protocol_; }  // PROTO's argument; 0 without one

 private:
  friend class Parser;
  std::unique_ptr<Arena> arena_;
  Value root_;
  size_t consumed_ = 0;
  int protocol_ = 0;
};

// Time and memory stay linear in the input's size whatever it holds: the
// memo is a vector only up to the number of distinct keys stored so far
// (plus kMemoSlack), a map beyond, so an index cannot make the reader
// allocate in proportion to its value; containers grow geometrically.
struct Limits {
  size_t max_stack = size_t(1) << 24;  // values on the stack at once (Python's own pickles stay tiny)
  size_t max_marks = size_t(1) << 16;  // MARK nesting (Python's pickler recurses: ~1000 at most)
  static constexpr size_t kMemoSlack = 4096;
};

// Parse one pickle from data[0, size). On failure *err is
// "NAME: offset N: what" and *out is untouched.
bool parse(const uint8_t* data, size_t size, const std::string& name, Document* out,
           std::string* err, const Limits& limits = Limits());

// A Python-like repr for messages and tests, cut at max_depth levels and
// max_items items per container ("..."). Safe on cyclic values.
std::string describe(const Value& v, int max_depth = 4, size_t max_items = 8);

// What the reader's two cost claims rest on, counted on the calling thread
// so that a test bounds them by counting, not by timing: dict lookups and
// the key comparisons they made (find() is O(log n) for an indexed key), and
// the growths of dict entry vectors and the entries each growth moved
// (geometric growth moves fewer than 2 per entry in all).
struct Counts {
  uint64_t finds = 0;
  uint64_t find_compares = 0;
  uint64_t entry_growths = 0;
  uint64_t entries_moved = 0;
};
Counts& counts();  // this thread's; assign Counts() to reset

// The name of an opcode ("BINUNICODE"), or nullptr for a byte that is not one.
const char* opcode_name(uint8_t op);

}  // namespace vpickle
