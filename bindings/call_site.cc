// hora._core.call_site: the user's `file.py:line` that submitted an operation, found by walking
// the Python stack in C++. Every submission asks for it, and the same walk in Python cost most of
// a microsecond (a frame object, a cache lookup and a formatted string per frame looked at).
// Which files are the user's stays decided in Python (hora.common.call_sites, the one place that
// knows Hora's and the frameworks' directories); this keeps its answers per file.
#include <pybind11/pybind11.h>

#include <string>
#include <unordered_map>

#include "bindings/call_site.h"
#include "bindings/register.h"

namespace py = pybind11;

namespace hora::bindings {
namespace {

// What the classifier says of one file: 0 a user's, 1 a framework's, 2 Hora's.
constexpr int kUserFile = 0;
constexpr int kFrameworkFile = 1;
// Bounds the cache: a process that runs more files than this starts over.
constexpr size_t kMaxFiles = 4096;
constexpr size_t kMaxSites = 4096;  // likewise for the positions submitted from

struct FileFacts {
  int owner;
  std::string baseName;
};

// Where a frame stands: its code object and the offset of its last instruction.
struct Position {
  PyObject* code;
  int lasti;
  bool operator==(const Position& o) const { return code == o.code && lasti == o.lasti; }
};

struct PositionHash {
  size_t operator()(const Position& p) const {
    return std::hash<const void*>()(p.code) * 31 + std::hash<int>()(p.lasti);
  }
};

// Keyed by the code objects' filename strings, each held by a reference so that its address
// cannot be reused by another string while it is a key; the sites likewise hold their code
// objects. Touched only with the GIL held.
struct FileCache {
  py::object classifier;  // callable(filename) -> int, set by hora.common.call_sites
  std::unordered_map<PyObject*, FileFacts> files;
  // "file.py:12" per position: a line number costs a scan of the code's line table, and a
  // training loop submits from the same few positions every step.
  std::unordered_map<Position, std::string, PositionHash> sites;

  void clearSites() {
    for (auto& kv : sites) Py_DECREF(kv.first.code);
    sites.clear();
  }
  void clear() {
    for (auto& kv : files) Py_DECREF(kv.first);
    files.clear();
    clearSites();
  }
};

FileCache& cache() {
  // Never destroyed: Python may be finalizing when static destructors run.
  static auto* c = new FileCache();
  return *c;
}

std::string baseNameOf(const std::string& path) {
  size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

const FileFacts& factsOf(PyObject* filename) {
  FileCache& c = cache();
  auto it = c.files.find(filename);
  if (it != c.files.end()) return it->second;
  if (c.classifier.is_none() || !c.classifier) {
    throw std::runtime_error("hora._core.call_site: no file classifier was set");
  }
  py::handle name(filename);
  int owner = c.classifier(name).cast<int>();
  if (c.files.size() >= kMaxFiles) c.clear();
  Py_INCREF(filename);
  auto& facts = c.files[filename];
  facts.owner = owner;
  facts.baseName = baseNameOf(name.cast<std::string>());
  return facts;
}

// A new reference to `frame`'s caller (null at the bottom of the stack); drops `frame`.
PyFrameObject* callerOf(PyFrameObject* frame) {
  PyFrameObject* back = PyFrame_GetBack(frame);
  Py_DECREF(frame);
  return back;
}

// Set while a graph node runs what was built elsewhere: the stack then holds only the
// framework's executor, and the user's line is where the node was built.
thread_local std::string givenSite;

int lastInstruction(PyFrameObject* frame) {
#if PY_VERSION_HEX >= 0x030B0000
  return PyFrame_GetLasti(frame);
#else
  return frame->f_lasti;
#endif
}

std::string siteOf(const FileFacts& facts, PyFrameObject* frame, PyCodeObject* code) {
  FileCache& c = cache();
  Position at{reinterpret_cast<PyObject*>(code), lastInstruction(frame)};
  auto it = c.sites.find(at);
  if (it != c.sites.end()) return it->second;
  if (c.sites.size() >= kMaxSites) c.clearSites();
  std::string site = facts.baseName + ":" + std::to_string(PyFrame_GetLineNumber(frame));
  Py_INCREF(at.code);
  c.sites.emplace(at, site);
  return site;
}

// A new reference to the frame `depth` frames above the calling Python frame, or null (no
// error set) when the stack is not that deep. sys._getframe walks the interpreter's frames and
// makes a frame object for the one it returns only, where a walk with PyFrame_GetBack makes one
// for every frame it passes (a GC-tracked allocation each on Python 3.11 and later, since the
// frontend's frames are new at every call).
PyFrameObject* frameAbove(int depth) {
  // Held for good: a later `sys._getframe = ...` must not leave this dangling.
  static PyObject* const getFrame = [] {
    PyObject* found = PySys_GetObject("_getframe");  // borrowed
    Py_XINCREF(found);
    return found;
  }();
  if (getFrame == nullptr) {
    PyFrameObject* frame = PyEval_GetFrame();
    Py_XINCREF(frame);
    for (int i = 0; i < depth && frame != nullptr; ++i) frame = callerOf(frame);
    return frame;
  }
  py::object level = py::reinterpret_steal<py::object>(PyLong_FromLong(depth));
  PyObject* frame = PyObject_CallOneArg(getFrame, level.ptr());
  if (frame == nullptr) {
    if (!PyErr_ExceptionMatches(PyExc_ValueError)) throw py::error_already_set();
    PyErr_Clear();  // "call stack is not deep enough"
    return nullptr;
  }
  return reinterpret_cast<PyFrameObject*>(frame);
}

}  // namespace

std::string callSite(int skip) {
  if (!givenSite.empty()) return givenSite;
  PyFrameObject* frame = frameAbove(skip);
  // Fewer frames than announced: look at every one.
  if (frame == nullptr && skip > 0) frame = frameAbove(0);
  if (frame == nullptr) return "";
  std::string fallback;
  while (frame != nullptr) {
    PyCodeObject* code = PyFrame_GetCode(frame);
    const FileFacts* facts = nullptr;
    try {
      facts = &factsOf(code->co_filename);
    } catch (...) {
      Py_DECREF(code);
      Py_DECREF(frame);
      throw;
    }
    if (facts->owner == kUserFile) {
      std::string site = siteOf(*facts, frame, code);
      Py_DECREF(code);
      Py_DECREF(frame);
      return site;
    }
    if (facts->owner == kFrameworkFile && fallback.empty()) fallback = siteOf(*facts, frame, code);
    Py_DECREF(code);
    frame = callerOf(frame);
  }
  return fallback;
}

void registerCallSite(py::module_& m) {
  m.def(
      "set_call_site_classifier",
      [](py::object classifier) {
        cache().clear();
        cache().classifier = std::move(classifier);
      },
      py::arg("classifier"),
      "Sets the function call_site asks, once per file name, whose file it is: 0 the user's, 1 "
      "a framework's, 2 Hora's (hora.common.call_sites sets it on import).");
  m.def(
      "give_call_site",
      [](std::string site) {
        std::swap(site, givenSite);
        return site;
      },
      py::arg("site"),
      "Makes `site` this thread's call site until it is given another (\"\" looks at the stack "
      "again); returns the one it replaces. A graph node submits with the site that built it.");
  m.def("call_site", &callSite, py::arg("skip") = 0,
        "The site this thread was given, else `file.py:line` of the caller's frame, or of the "
        "first frame above it outside Hora and the frameworks (else the first outside Hora, "
        "else \"\"); `skip`: frames above the caller's that are certainly Hora's, not looked "
        "at.");
}

}  // namespace hora::bindings
