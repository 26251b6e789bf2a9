#include "guardrails/rule_set.h"

#include <hs/hs.h>
#include <re2/re2.h>

#include <algorithm>
#include <cctype>
#include <climits>
#include <cstdlib>

#include "guardrails/injection_signals.h"

namespace tahua::guardrails {
namespace {

// A literal as a pattern: every byte that is not a letter or digit escaped.
std::string literalPattern(std::string_view lit) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (char c : lit) {
    const auto u = static_cast<unsigned char>(c);
    if ((u >= 'a' && u <= 'z') || (u >= 'A' && u <= 'Z') || (u >= '0' && u <= '9')) {
      out += c;
    } else {
      out += "\\x";
      out += kHex[u >> 4];
      out += kHex[u & 15];
    }
  }
  return out;
}

struct Expr {
  std::string pattern;
  unsigned flags;
  std::uint16_t rule;
  bool (*valid)(std::string_view);
  double weight;
  std::string what;  // for errors: "patterns[2]", "literals[0]", "pii email"
  std::bitset<256> bytes = std::bitset<256>().set();  // what a match can contain (all: unknown)
  bool whole_run = false;                              // a number: judged on its whole run
};


// The injection signals, compiled once per process in block mode (input only), without
// UTF-8 mode: a bounded gap of any bytes (`.{0,60}`) compiles in milliseconds instead of
// a second, and the Chinese phrases are matched as the byte strings they are. A signal
// with excuses reports every occurrence (each is judged); the others their first.
const hs_database_t* injectionDatabase() {
  static hs_database_t* const db = [] {
    std::vector<const char*> patterns;
    std::vector<unsigned> flags, ids;
    const auto signals = injectionSignals();
    for (std::size_t i = 0; i < signals.size(); ++i) {
      patterns.push_back(signals[i].pattern);
      const bool every = signals[i].then || signals[i].ending;
      flags.push_back(HS_FLAG_CASELESS | HS_FLAG_DOTALL | (every ? 0u : HS_FLAG_SINGLEMATCH));
      ids.push_back(static_cast<unsigned>(i));
    }
    hs_database_t* out = nullptr;
    hs_compile_error_t* err = nullptr;
    if (hs_compile_multi(patterns.data(), flags.data(), ids.data(), static_cast<unsigned>(patterns.size()), HS_MODE_BLOCK, nullptr,
                         &out, &err) != HS_SUCCESS) {
      hs_free_compile_error(err);  // a unit test compiles every signal: not reached
      return static_cast<hs_database_t*>(nullptr);
    }
    return out;
  }();
  return db;
}

// The signals' excuses (InjectionSignal::then, ::ending), in RE2 over the same bytes
// (Latin-1: a byte is a character, as for Hyperscan without UTF-8 mode). Run only for an
// occurrence of a signal that has them.
struct Excuses {
  std::unique_ptr<RE2> then, ending;
};
const std::vector<Excuses>& injectionExcuses() {
  static const std::vector<Excuses> all = [] {
    RE2::Options o;
    o.set_log_errors(false);
    o.set_encoding(RE2::Options::EncodingLatin1);
    o.set_case_sensitive(false);
    o.set_dot_nl(true);
    std::vector<Excuses> out;
    for (const InjectionSignal& sig : injectionSignals()) {
      Excuses x;
      // From the end of the occurrence's word: "instruction" ends a match of
      // "instructions?" too.
      if (sig.then) x.then = std::make_unique<RE2>(std::string("\\w*(?:") + sig.then + ")", o);
      if (sig.ending) x.ending = std::make_unique<RE2>(std::string("(?:") + sig.ending + ")\\z", o);
      out.push_back(std::move(x));
    }
    return out;
  }();
  return all;
}

bool excused(const Excuses& x, std::string_view text, std::size_t end) {
  if (x.then && x.then->Match(re2::StringPiece(text.data(), text.size()), end, text.size(), RE2::ANCHOR_START, nullptr, 0))
    return true;
  // `\z` needs the text to end where the occurrence does.
  constexpr std::size_t kEndingWindow = 256;
  return x.ending && x.ending->Match(re2::StringPiece(text.data(), end), end > kEndingWindow ? end - kEndingWindow : 0, end,
                                     RE2::UNANCHORED, nullptr, 0);
}

// The distinct signals in `subject` whose occurrences are not all excused, and the
// hidden-text tricks folding counted.
void readSignals(std::string_view subject, const FoldStats& stats, const hs_database_t* db, hs_scratch* s, InjectionReading& out) {
  out.score = 0;
  out.signals.clear();
  const auto signals = injectionSignals();
  if (s) {
    thread_local std::vector<std::pair<unsigned, unsigned long long>> seen;  // (signal, end)
    seen.clear();
    hs_scan(db, subject.data(), static_cast<unsigned>(subject.size()), 0, s,
            [](unsigned id, unsigned long long, unsigned long long to, unsigned, void* ctx) {
              static_cast<std::vector<std::pair<unsigned, unsigned long long>>*>(ctx)->push_back({id, to});
              return 0;
            },
            &seen);
    std::sort(seen.begin(), seen.end());
    const auto& excuses = injectionExcuses();
    for (std::size_t i = 0; i < seen.size();) {
      const unsigned id = seen[i].first;
      bool counts = false;
      for (; i < seen.size() && seen[i].first == id; ++i)
        counts = counts || id >= excuses.size() || !excused(excuses[id], subject, static_cast<std::size_t>(seen[i].second));
      if (!counts || id >= signals.size()) continue;
      out.score += signals[id].weight;
      out.signals.push_back(static_cast<std::uint16_t>(id));
    }
  }
  if (stats.invisible >= kInvisibleCount) {
    out.score += kInvisibleWeight;
    out.signals.push_back(static_cast<std::uint16_t>(invisibleSignal()));
  }
  if (stats.tags > 0) {
    out.score += kTagWeight;
    out.signals.push_back(static_cast<std::uint16_t>(tagSignal()));
  }
}

// `subject` with the allow-listed phrases (folded, lower-case) blanked in a copy: with a
// byte that is neither a word's nor a space's, so no signal can use them or join across
// them.
std::string_view withoutAllowed(std::string_view subject, const std::vector<std::string>& allow, std::string& copy) {
  thread_local std::string lower;
  lower.assign(subject);
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  copy.assign(subject);
  for (const std::string& phrase : allow)
    for (std::size_t at = lower.find(phrase); at != std::string::npos; at = lower.find(phrase, at + phrase.size())) {
      copy.replace(at, phrase.size(), phrase.size(), '\x1f');
      lower.replace(at, phrase.size(), phrase.size(), '\x1f');
    }
  return copy;
}

// "A-Za-z0-9._" as a byte set.
std::bitset<256> byteClass(std::string_view spec) {
  std::bitset<256> out;
  for (std::size_t i = 0; i < spec.size(); ++i) {
    const auto a = static_cast<unsigned char>(spec[i]);
    if (i + 2 < spec.size() && spec[i + 1] == '-') {
      for (unsigned c = a; c <= static_cast<unsigned char>(spec[i + 2]); ++c) out.set(c);
      i += 2;
    } else {
      out.set(a);
    }
  }
  return out;
}

// The bytes of a literal (both cases of its letters when caseless; any byte of a UTF-8
// sequence when caseless, since a letter's other case may be another sequence).
std::bitset<256> literalBytes(std::string_view lit, bool caseless) {
  std::bitset<256> out;
  for (char c : lit) {
    const auto u = static_cast<unsigned char>(c);
    out.set(u);
    if (caseless && u < 0x80 && std::isalpha(u)) {
      out.set(static_cast<unsigned char>(std::tolower(u)));
      out.set(static_cast<unsigned char>(std::toupper(u)));
    }
    if (caseless && u >= 0x80)
      for (unsigned b = 0x80; b < 0x100; ++b) out.set(b);
  }
  if (caseless)  // 'k' and 's' match KELVIN SIGN and LONG S (three and two bytes)
    for (unsigned b = 0x80; b < 0x100; ++b) out.set(b);
  return out;
}

struct Collector {
  std::vector<std::pair<unsigned, std::pair<unsigned long long, unsigned long long>>> raw;
};

int collect(unsigned id, unsigned long long from, unsigned long long to, unsigned, void* ctx) {
  static_cast<Collector*>(ctx)->raw.push_back({id, {from, to}});
  return 0;
}

}  // namespace

bool RuleSet::injectionSignalsCompile() {
  const auto& excuses = injectionExcuses();
  return injectionDatabase() != nullptr && std::all_of(excuses.begin(), excuses.end(), [](const Excuses& x) {
           return (!x.then || x.then->ok()) && (!x.ending || x.ending->ok());
         });
}

std::string foldedPhrase(std::string_view phrase) {
  std::string out;
  std::vector<std::uint32_t> origin;
  FoldStats stats;
  foldAppend(phrase, 0, out, origin, stats);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string_view actionName(Action a) {
  switch (a) {
    case Action::Flag: return "flag";
    case Action::Redact: return "redact";
    case Action::Block: return "block";
  }
  return "";
}

void mergeHits(std::vector<RuleHit>& hits) {
  std::sort(hits.begin(), hits.end(), [](const RuleHit& a, const RuleHit& b) {
    return a.rule < b.rule || (a.rule == b.rule && (a.begin < b.begin || (a.begin == b.begin && a.end > b.end)));
  });
  std::size_t w = 0;
  for (std::size_t i = 0; i < hits.size(); ++i) {
    if (w > 0 && hits[w - 1].rule == hits[i].rule && hits[i].begin <= hits[w - 1].end) {
      hits[w - 1].end = std::max(hits[w - 1].end, hits[i].end);
      continue;
    }
    hits[w++] = hits[i];
  }
  hits.resize(w);
}

RuleScratch::~RuleScratch() {
  if (scratch_) hs_free_scratch(scratch_);
}

hs_scratch* RuleScratch::forDatabase(const hs_database* db) {
  if (std::find(fitted_.begin(), fitted_.end(), db) == fitted_.end()) {
    if (hs_alloc_scratch(db, &scratch_) != HS_SUCCESS) return nullptr;
    fitted_.push_back(db);
  }
  return scratch_;
}

RuleSet::RuleSet() = default;

RuleSet::~RuleSet() {
  if (db_) hs_free_database(db_);
}

std::shared_ptr<const RuleSet> RuleSet::compile(std::vector<RuleSpec> rules, std::string& error) {
  std::vector<Expr> exprs;
  for (std::size_t r = 0; r < rules.size(); ++r) {
    const RuleSpec& spec = rules[r];
    const auto rule = static_cast<std::uint16_t>(r);
    const unsigned base = HS_FLAG_UTF8;
    switch (spec.detector) {
      case RuleSpec::Detector::Patterns:
        for (std::size_t i = 0; i < spec.patterns.size(); ++i)
          exprs.push_back({spec.patterns[i], base | HS_FLAG_DOTALL | (spec.caseless ? HS_FLAG_CASELESS : 0u), rule, nullptr, 0,
                           "patterns[" + std::to_string(i) + "]"});
        for (std::size_t i = 0; i < spec.literals.size(); ++i)
          exprs.push_back({literalPattern(spec.literals[i]), base | (spec.caseless ? HS_FLAG_CASELESS : 0u), rule, nullptr, 0,
                           "literals[" + std::to_string(i) + "]", literalBytes(spec.literals[i], spec.caseless)});
        break;
      case RuleSpec::Detector::Pii:
        for (const PiiShape& shape : piiShapes()) {
          if (!spec.pii.empty() && std::find(spec.pii.begin(), spec.pii.end(), shape.kind) == spec.pii.end()) continue;
          exprs.push_back({shape.pattern, base | (shape.caseless ? HS_FLAG_CASELESS : 0u), rule, shape.valid, 0,
                           "pii " + std::string(piiKindName(shape.kind)), byteClass(shape.chars), shape.whole_run});
        }
        break;
      case RuleSpec::Detector::Injection:
        // The signals' own database (injectionDatabase), shared by every policy: compiled
        // here, where the config loads, not by the first request a worker sees (about a
        // second of Hyperscan's compiler, every connection of that worker waiting).
        if (!injectionSignalsCompile()) {
          error = "rule \"" + spec.name + "\": the injection signals did not compile";
          return nullptr;
        }
        break;
      case RuleSpec::Detector::Moderation:
      case RuleSpec::Detector::Quality:
        break;  // HTTP calls the filter makes
    }
  }
  auto set = std::shared_ptr<RuleSet>(new RuleSet());
  set->width_.assign(rules.size(), 0);
  // Hyperscan finds where matches end, without tracking where they start (its start of
  // match mode costs several times the scan and refuses many bounded shapes); a match is
  // rare, and RE2 then finds its start in a second pass over the bytes before its end (a
  // window a stream keeps). So every pattern must be one both accept.
  set->starts_.resize(exprs.size());
  for (std::size_t i = 0; i < exprs.size(); ++i) {
    const Expr& e = exprs[i];
    RE2::Options o;
    o.set_log_errors(false);
    o.set_case_sensitive(!(e.flags & HS_FLAG_CASELESS));
    o.set_dot_nl((e.flags & HS_FLAG_DOTALL) != 0);
    auto start = std::make_unique<RE2>("(?:" + e.pattern + ")\\z", o);
    if (!start->ok()) {
      error = "rule \"" + rules[e.rule].name + "\" " + e.what + ": " + start->error();
      return nullptr;
    }
    set->starts_[i] = std::move(start);
  }
  for (const Expr& e : exprs) {
    hs_expr_info_t* info = nullptr;
    hs_compile_error_t* err = nullptr;
    if (hs_expression_info(e.pattern.c_str(), e.flags, &info, &err) != HS_SUCCESS) {
      error = "rule \"" + rules[e.rule].name + "\" " + e.what + ": " + (err && err->message ? err->message : "refused by the matcher");
      hs_free_compile_error(err);
      return nullptr;
    }
    const std::size_t width = std::min<std::size_t>(info->max_width == UINT_MAX ? SIZE_MAX : info->max_width, rules[e.rule].max_match_chars);
    std::free(info);
    set->width_[e.rule] = std::max(set->width_[e.rule], width);
    set->shapes_.push_back({e.rule, HoldShape{e.bytes, width + 1}});  // +1: a \b at the end needs the next byte
  }
  for (const RuleSpec& spec : rules) {
    set->targets_ |= spec.targets;
    if (spec.detector == RuleSpec::Detector::Injection) set->injection_rules_ |= spec.targets;
  }
  set->rules_ = std::move(rules);
  if (exprs.empty()) return set;
  std::vector<const char*> patterns;
  std::vector<unsigned> flags, ids;
  for (std::size_t i = 0; i < exprs.size(); ++i) {
    patterns.push_back(exprs[i].pattern.c_str());
    flags.push_back(exprs[i].flags);
    ids.push_back(static_cast<unsigned>(i));
    set->refs_.push_back({exprs[i].rule, exprs[i].valid, exprs[i].weight, exprs[i].whole_run});
  }
  hs_compile_error_t* err = nullptr;
  if (hs_compile_multi(patterns.data(), flags.data(), ids.data(), static_cast<unsigned>(exprs.size()),
                       HS_MODE_STREAM, nullptr, &set->db_, &err) != HS_SUCCESS) {
    const std::string why = err && err->message ? err->message : "refused by the matcher";
    if (err && err->expression >= 0 && static_cast<std::size_t>(err->expression) < exprs.size()) {
      const Expr& e = exprs[static_cast<std::size_t>(err->expression)];
      error = "rule \"" + set->rules_[e.rule].name + "\" " + e.what + ": " + why;
    } else {
      error = "the policy's patterns together: " + why;
    }
    hs_free_compile_error(err);
    return nullptr;
  }
  return set;
}

bool RuleSet::anyAction(std::uint8_t targets, Action a) const {
  return std::any_of(rules_.begin(), rules_.end(), [&](const RuleSpec& r) { return (r.targets & targets) && r.action == a; });
}

std::size_t RuleSet::holdBack(std::uint8_t targets) const {
  std::size_t hold = 0;
  for (std::size_t r = 0; r < rules_.size(); ++r)
    if (rules_[r].targets & targets) hold = std::max(hold, width_[r]);
  return hold;
}

std::vector<RuleSet::HoldShape> RuleSet::holdShapes(std::uint8_t targets) const {
  std::vector<HoldShape> out;
  for (const auto& [rule, shape] : shapes_)
    if (rules_[rule].targets & targets) out.push_back(shape);
  return out;
}

RunVerdict RuleSet::judge(unsigned id, std::uint8_t targets, std::string_view text, std::size_t& begin, std::size_t end,
                          bool complete) const {
  if (id >= refs_.size()) return RunVerdict::Part;
  const PatternRef& ref = refs_[id];
  if (!(rules_[ref.rule].targets & targets)) return RunVerdict::Part;
  // A number inside a longer run is no match, even when its digits would pass the check:
  // the run is judged whole (its own match, if the shape reaches that far), never in part.
  if (ref.whole_run) {
    const RunVerdict after = runEndsAt(text, end, complete);
    if (after != RunVerdict::Whole) return after;
    if (runJoinedBefore(text, begin)) {
      // The leftmost start joins a longer run; a later one may begin a run of its own
      // ("2024-01-05 415-555-2671": the shape reaches back into the date).
      std::size_t b = begin + 1;
      for (; b < end; ++b) {
        const char c = text[b], prev = text[b - 1];
        if (prev >= '0' && prev <= '9') continue;
        if (!((c >= '0' && c <= '9') || c == '(' || c == '+')) continue;
        if (!runJoinedBefore(text, b) && matchesFrom(id, text, b, end)) break;
      }
      if (b >= end) return RunVerdict::Part;
      begin = b;
    }
  }
  return !ref.valid || ref.valid(text.substr(begin, end - begin)) ? RunVerdict::Whole : RunVerdict::Part;
}

bool RuleSet::matchesFrom(unsigned id, std::string_view text, std::size_t begin, std::size_t end) const {
  const re2::RE2* start = starts_[id].get();
  if (!start) return false;
  return start->Match(re2::StringPiece(text.data(), end), begin, end, re2::RE2::ANCHOR_BOTH, nullptr, 0);
}

std::size_t RuleSet::startOf(unsigned id, std::string_view text, std::size_t floor, std::size_t from, std::size_t to) const {
  const re2::RE2* start = starts_[id].get();
  if (!start) return std::max(floor, from);
  const std::size_t cap = rules_[refs_[id].rule].max_match_chars;
  const std::size_t window = to - floor > cap ? to - cap : floor;
  re2::StringPiece m;
  // The text given ends at the match's end: RE2 refuses `\z` before the text's end.
  if (start->Match(re2::StringPiece(text.data(), to), window, to, re2::RE2::UNANCHORED, &m, 1))
    return static_cast<std::size_t>(m.data() - text.data());
  return window;  // the shape needs what lies before the window: take the whole window
}

void RuleSet::scanText(std::string_view text, RuleScratch& scratch, std::uint8_t targets, std::vector<RuleHit>& out,
                       std::vector<InjectionReading>* readings) const {
  if (!(targets_ & targets) || text.empty()) return;
  // Plain ASCII is matched as it is; anything else folded, with a map back.
  thread_local std::string folded;
  thread_local std::vector<std::uint32_t> origin;
  FoldStats stats;
  const bool identity = foldIsIdentity(text);
  std::string_view subject = text;
  if (!identity) {
    folded.clear();
    origin.clear();
    foldAppend(text, 0, folded, origin, stats);
    subject = folded;
  }
  thread_local Collector found;
  found.raw.clear();
  if (hs_scratch* s = db_ ? scratch.forDatabase(db_) : nullptr) {
    hs_stream* stream = nullptr;
    if (hs_open_stream(db_, 0, &stream) == HS_SUCCESS) {
      hs_scan_stream(stream, subject.data(), static_cast<unsigned>(subject.size()), 0, s, collect, &found);
      hs_close_stream(stream, s, collect, &found);
    }
  }

  const auto place = [&](std::size_t from, std::size_t to) {
    if (identity) return Range{from, to};
    return originalRange(origin, from, to, text.size());
  };
  for (const auto& [id, span] : found.raw) {
    const auto [from, to] = span;
    if (id >= refs_.size() || to > subject.size() || from > to) continue;
    const PatternRef& ref = refs_[id];
    if (!(rules_[ref.rule].targets & targets)) continue;
    std::size_t begin = startOf(id, subject, 0, static_cast<std::size_t>(from), static_cast<std::size_t>(to));
    if (judge(id, targets, subject, begin, static_cast<std::size_t>(to), true) != RunVerdict::Whole) continue;
    const Range r = place(begin, static_cast<std::size_t>(to));
    out.push_back(RuleHit{ref.rule, r.begin, r.end});
  }
  if (injection_rules_ & targets) scanInjection(subject, stats, scratch, targets, text.size(), out, readings);
}

void RuleSet::scanInjection(std::string_view subject, const FoldStats& stats, RuleScratch& scratch, std::uint8_t targets,
                            std::size_t text_size, std::vector<RuleHit>& out, std::vector<InjectionReading>* readings) const {
  // The distinct signals' weights, summed; a hit is the whole text (where the signals are
  // does not matter). Rules without an allow list share one reading.
  const hs_database_t* db = injectionDatabase();
  hs_scratch* s = db ? scratch.forDatabase(db) : nullptr;
  thread_local InjectionReading shared, own;
  thread_local std::string blanked;
  bool have_shared = false;
  for (std::size_t r = 0; r < rules_.size(); ++r) {
    const RuleSpec& rule = rules_[r];
    if (rule.detector != RuleSpec::Detector::Injection || !(rule.targets & targets)) continue;
    InjectionReading* reading = &shared;
    if (!rule.allow.empty()) {
      reading = &own;
      readSignals(withoutAllowed(subject, rule.allow, blanked), stats, db, s, own);
    } else if (!have_shared) {
      readSignals(subject, stats, db, s, shared);
      have_shared = true;
    }
    if (reading->score <= 0) continue;
    if (reading->score >= rule.threshold) out.push_back(RuleHit{static_cast<std::uint16_t>(r), 0, text_size});
    if (readings) readings->push_back(InjectionReading{static_cast<std::uint16_t>(r), reading->score, reading->signals});
  }
}

// ---- TextStream ----

TextStream::TextStream(std::shared_ptr<const RuleSet> rules, std::uint8_t targets)
    : rules_(std::move(rules)), targets_(targets), hold_(rules_->holdBack(targets) + 1), shapes_(rules_->holdShapes(targets)) {
  // Longest first: once the hold covers a shape's whole width, the shorter ones cannot
  // add to it.
  std::sort(shapes_.begin(), shapes_.end(), [](const auto& a, const auto& b) { return a.width > b.width; });
}

TextStream::TextStream(TextStream&& o) noexcept
    : rules_(std::move(o.rules_)),
      targets_(o.targets_),
      stream_(o.stream_),
      hold_(o.hold_),
      shapes_(std::move(o.shapes_)),
      held_(o.held_),
      folded_(std::move(o.folded_)),
      origin_(std::move(o.origin_)),
      fbase_(o.fbase_),
      orig_size_(o.orig_size_),
      stats_(o.stats_),
      raw_(std::move(o.raw_)),
      pending_(std::move(o.pending_)),
      closed_(o.closed_) {
  o.stream_ = nullptr;
}

TextStream::~TextStream() {
  if (stream_) hs_close_stream(stream_, nullptr, nullptr, nullptr);
}

int TextStream::onMatch(unsigned id, unsigned long long from, unsigned long long to, unsigned, void* ctx) {
  static_cast<std::vector<Raw>*>(ctx)->push_back(Raw{id, from, to});
  return 0;
}

void TextStream::feed(std::string_view piece, RuleScratch& scratch, std::vector<RuleHit>& out) {
  if (closed_ || piece.empty()) return;
  const std::size_t start = folded_.size();
  foldAppend(piece, orig_size_, folded_, origin_, stats_);
  orig_size_ += piece.size();
  if (!rules_->db_) return;
  hs_scratch* s = scratch.forDatabase(rules_->db_);
  if (!s) return;
  if (!stream_ && hs_open_stream(rules_->db_, 0, &stream_) != HS_SUCCESS) return;
  raw_.clear();
  hs_scan_stream(stream_, folded_.data() + start, static_cast<unsigned>(folded_.size() - start), 0, s, onMatch, &raw_);
  collect(out);
  updateHold();
  // Keep the tail a later match can still start in; compact in large steps.
  const std::size_t total = fbase_ + folded_.size();
  if (total > hold_ + fbase_ + 4096 && held_ <= hold_) {
    const std::size_t drop = total - hold_ - fbase_;
    folded_.erase(0, drop);
    origin_.erase(origin_.begin(), origin_.begin() + static_cast<std::ptrdiff_t>(drop));
    fbase_ += drop;
  }
}

void TextStream::updateHold() {
  // The longest of the rules' trailing runs (each at most its longest match). Trimming
  // keeps hold_ >= every width bytes in the buffer, so the held bytes are all there.
  held_ = 0;
  const std::size_t n = folded_.size();
  for (const auto& shape : shapes_) {
    if (shape.width <= held_) break;
    const std::size_t cap = std::min(shape.width, n);
    std::size_t run = 0;
    while (run < cap && shape.bytes[static_cast<unsigned char>(folded_[n - 1 - run])]) ++run;
    held_ = std::max(held_, run);
  }
  // A match waiting for its verdict is held whole.
  for (const Raw& m : pending_) held_ = std::max<std::size_t>(held_, fbase_ + n - m.from);
}

void TextStream::close(RuleScratch& scratch, std::vector<RuleHit>& out) {
  if (closed_) return;
  closed_ = true;
  if (!stream_) return;
  raw_.clear();
  hs_close_stream(stream_, scratch.forDatabase(rules_->db_), onMatch, &raw_);
  stream_ = nullptr;
  collect(out);
}

void TextStream::collect(std::vector<RuleHit>& out) {
  // Matches whose verdict waited on text to come are judged again with the new ones.
  raw_.insert(raw_.begin(), pending_.begin(), pending_.end());
  pending_.clear();
  for (const Raw& m : raw_) {
    if (m.to < m.from || m.to <= fbase_ || m.to > fbase_ + folded_.size()) continue;
    const std::size_t to = m.to - fbase_;
    std::size_t from = rules_->startOf(m.id, folded_, 0, std::max<std::size_t>(m.from, fbase_) - fbase_, to);
    const RunVerdict v = rules_->judge(m.id, targets_, folded_, from, to, closed_);
    if (v == RunVerdict::Unknown) {
      pending_.push_back(Raw{m.id, fbase_ + from, m.to});  // its start found: kept from there
      continue;
    }
    if (v != RunVerdict::Whole) continue;
    const Range r = originalRange(origin_, from, to, orig_size_);
    out.push_back(RuleHit{rules_->refs_[m.id].rule, r.begin, r.end});
  }
}

std::size_t TextStream::safeEnd() const {
  if (closed_) return orig_size_;
  // Trimming keeps fbase_ <= total - hold_, so the bound's byte is still in the buffer.
  if (held_ == 0) return orig_size_;
  return origin_[folded_.size() - held_];
}

}  // namespace tahua::guardrails
