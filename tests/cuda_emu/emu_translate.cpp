/* emu_translate.cpp — a .cu (or .cuh) file as the CUDA emulator compiles it: host C++
 * against emu.h (docs/emulator.md). Usage: emu_translate IN OUT
 *
 * The file is split into tokens (comments, strings and preprocessor lines pass through
 * untouched, and so does every newline: the compiler's line numbers are the source's,
 * through a #line at the top). Four rewrites, nothing else:
 *   1. F<<<cfg>>>(args)            -> dm_emu::kernel_launch(F, "F", dm_emu::launch_config(cfg))(args)
 *   2. extern __shared__ T s[];     -> dm_emu::ptr<T> s = dm_emu::dynamic_shared<T>();
 *   3. __shared__ T a[n]...;        -> dm_emu::sview<T[n]...> a = dm_emu::static_shared<T[n]...>(site);
 *   4. [const] A [const] *          -> dm_emu::ptr<[const] A>  for the arithmetic types A,
 *      and ", *x" -> ", x" in the rest of that declaration; not inside the parameter list
 *      of an extern "C" function (the C entry points keep the header's signatures).
 */
#include <cctype>
#include <cstdio>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace {

enum Kind { ID, NUM, PUNCT, STR, SPACE, PP };
struct Tok {
    Kind k;
    std::string s;
};

std::vector<Tok> lex(const std::string &src) {
    std::vector<Tok> t;
    size_t i = 0, n = src.size();
    bool line_start = true;
    while (i < n) {
        char c = src[i];
        size_t j = i;
        if (c == '\n' || isspace((unsigned char)c)) {
            while (j < n && isspace((unsigned char)src[j])) {
                if (src[j] == '\n') line_start = true;
                j++;
            }
            t.push_back({SPACE, src.substr(i, j - i)});
            i = j;
            continue;
        }
        if (c == '#' && line_start) { /* a preprocessor line, with its continuations */
            while (j < n && src[j] != '\n') {
                if (src[j] == '\\' && j + 1 < n && src[j + 1] == '\n') j++;
                j++;
            }
            t.push_back({PP, src.substr(i, j - i)});
            i = j;
            continue;
        }
        line_start = false;
        if (c == '/' && i + 1 < n && src[i + 1] == '/') {
            while (j < n && src[j] != '\n') j++;
            t.push_back({SPACE, src.substr(i, j - i)});
        } else if (c == '/' && i + 1 < n && src[i + 1] == '*') {
            size_t e = src.find("*/", i + 2);
            j = e == std::string::npos ? n : e + 2;
            t.push_back({SPACE, src.substr(i, j - i)});
        } else if (c == '"' || c == '\'') {
            j++;
            while (j < n && src[j] != c) j += src[j] == '\\' ? 2 : 1;
            j = j < n ? j + 1 : n;
            t.push_back({STR, src.substr(i, j - i)});
        } else if (isalpha((unsigned char)c) || c == '_') {
            while (j < n && (isalnum((unsigned char)src[j]) || src[j] == '_')) j++;
            t.push_back({ID, src.substr(i, j - i)});
        } else if (isdigit((unsigned char)c) ||
                   (c == '.' && i + 1 < n && isdigit((unsigned char)src[i + 1]))) {
            /* a number: digits, letters, '.', and a sign right after an exponent's e */
            auto part = [&](size_t q) {
                char d = src[q];
                return isalnum((unsigned char)d) || d == '.' || d == '_' ||
                       ((d == '+' || d == '-') && (src[q - 1] == 'e' || src[q - 1] == 'E'));
            };
            while (j < n && part(j)) j++;
            t.push_back({NUM, src.substr(i, j - i)});
        } else {
            static const char *multi[] = {"<<<", ">>>", "::", "->", "++", "--", "&&", "||",
                                          "<=", ">=", "==", "!=", "+=", "-=", "*=", "/="};
            j = i + 1;
            for (const char *m : multi) {
                size_t L = std::string(m).size();
                if (src.compare(i, L, m) == 0) {
                    j = i + L;
                    break;
                }
            }
            t.push_back({PUNCT, src.substr(i, j - i)});
        }
        i = j;
    }
    return t;
}

/* char is left out: host code's strings (argv, names) stay char pointers */
const std::set<std::string> arith = {"float", "double", "int", "unsigned", "bool",
                                     "short", "long", "int8_t", "uint8_t", "int16_t",
                                     "uint16_t", "int32_t", "uint32_t", "int64_t", "uint64_t",
                                     "size_t"};

struct Rewriter {
    std::vector<Tok> t;
    std::vector<std::string> out; /* the replacement text of each token */
    std::set<std::string> macro_params; /* inside a #define: its parameters */

    bool sig(size_t i) const { return t[i].k != SPACE; }
    size_t next(size_t i) const { /* the next significant token after i (t.size(): none) */
        for (i++; i < t.size(); i++)
            if (sig(i)) return i;
        return t.size();
    }
    size_t prev(size_t i) const { /* the previous significant token (SIZE_MAX: none) */
        while (i-- > 0)
            if (sig(i)) return i;
        return (size_t)-1;
    }
    bool is(size_t i, const char *s) const { return i < t.size() && t[i].s == s; }
    void drop(size_t a, size_t b) { /* tokens [a, b) emptied */
        for (size_t i = a; i < b; i++) out[i].clear();
    }
    std::string text(size_t a, size_t b) const { /* the source of tokens [a, b) */
        std::string s;
        for (size_t i = a; i < b; i++) s += t[i].s;
        return s;
    }

    /* 1. launches */
    void launches() {
        for (size_t i = 0; i < t.size(); i++) {
            if (!is(i, "<<<")) continue;
            size_t j = prev(i);
            if (is(j, ">")) { /* template arguments: back to their '<' */
                int depth = 0;
                for (; j != (size_t)-1; j = prev(j)) {
                    if (is(j, ">")) depth++;
                    if (is(j, "<") && --depth == 0) break;
                }
                j = prev(j);
            }
            while (prev(j) != (size_t)-1 && is(prev(j), "::")) j = prev(prev(j));
            size_t close = i;
            while (close < t.size() && !is(close, ">>>")) close++;
            std::string callee = text(j, prev(i) + 1), name;
            for (char c : callee)
                if (c != '"' && c != '\n' && c != '\\') name += c;
            /* in a macro whose parameter is the kernel: the argument's spelling */
            std::string quoted = macro_params.count(callee) ? "#" + callee : "\"" + name + "\"";
            out[j] = "dm_emu::kernel_launch(" + out[j];
            out[i] = ", " + quoted + ", __FILE__, __LINE__, dm_emu::launch_config(";
            out[close] = "))";
        }
    }

    /* 2 and 3. shared memory */
    void shared() {
        for (size_t i = 0; i < t.size(); i++) {
            if (!is(i, "__shared__")) continue;
            size_t semi = i;
            while (semi < t.size() && !is(semi, ";")) semi++;
            size_t ext = prev(i);
            size_t first = next(i), br = first;
            while (br < semi && !is(br, "[")) br++;
            size_t name = prev(br);
            std::string type = text(first, name);
            std::string dims = text(br, semi);
            if (is(ext, "extern")) {
                drop(ext, semi);
                out[ext] = "dm_emu::ptr<" + type + "> " + t[name].s + " = dm_emu::dynamic_shared<" +
                           type + ">()";
            } else {
                drop(i, semi);
                out[i] = "dm_emu::sview<" + type + dims + "> " + t[name].s +
                         " = dm_emu::static_shared<" + type + dims +
                         ">([]() -> dm_emu::shared_site & { static dm_emu::shared_site s_; "
                         "return s_; }())";
            }
            i = semi;
        }
    }

    /* 4. pointers to arithmetic types */
    void pointers() {
        std::vector<bool> skip(t.size(), false);
        for (size_t i = 0; i < t.size(); i++) { /* extern "C" parameter lists */
            if (!(is(i, "extern") && is(next(i), "\"C\""))) continue;
            size_t j = i;
            while (j < t.size() && !is(j, "(")) j++;
            int depth = 0;
            for (; j < t.size(); j++) {
                if (is(j, "(")) depth++;
                if (is(j, ")") && --depth == 0) break;
                skip[j] = true;
            }
        }
        for (size_t i = 0; i < t.size(); i++) {
            if (t[i].k != ID || !arith.count(t[i].s) || skip[i]) continue;
            size_t a = i, b = next(i);
            bool cst = false;
            if (is(prev(i), "const")) a = prev(i), cst = true;
            if (is(b, "const")) cst = true, b = next(b);
            if (!is(b, "*")) continue;
            if (is(prev(a), "(") && is(next(b), ")")) continue; /* a cast: leave it */
            drop(a, b + 1);
            out[a] = std::string("dm_emu::ptr<") + (cst ? "const " : "") + t[i].s + "> ";
            /* the declaration's later declarators: ", *x" -> ", x" */
            int depth = 0;
            for (size_t j = next(b); j < t.size(); j = next(j)) {
                const std::string &s = t[j].s;
                if (s == "(" || s == "[" || s == "{") depth++;
                else if (s == ")" || s == "]" || s == "}") {
                    if (--depth < 0) break;
                } else if (depth == 0 && s == ";") break;
                else if (depth == 0 && s == "," && is(next(j), "*")) out[next(j)].clear();
            }
            i = b;
        }
    }
};

} // namespace

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: emu_translate IN.cu OUT.cpp\n");
        return 2;
    }
    std::ifstream in(argv[1], std::ios::binary);
    if (!in) {
        fprintf(stderr, "error: cannot read %s\n", argv[1]);
        return 2;
    }
    std::stringstream ss;
    ss << in.rdbuf();
    Rewriter r;
    r.t = lex(ss.str());
    for (const Tok &k : r.t) r.out.push_back(k.s);
    /* launches inside macro definitions: the #define's body rewritten the same way */
    for (size_t i = 0; i < r.t.size(); i++) {
        const std::string &pp = r.t[i].s;
        if (r.t[i].k != PP || pp.find("<<<") == std::string::npos) continue;
        Rewriter m;
        m.t = lex(pp.substr(1));
        for (const Tok &k : m.t) m.out.push_back(k.s);
        /* #define NAME(params): the parameters */
        size_t a = m.next((size_t)-1), b = m.next(a), c = m.next(b);
        if (m.is(a, "define") && m.is(c, "("))
            for (size_t j = m.next(c); j < m.t.size() && !m.is(j, ")"); j = m.next(j))
                if (m.t[j].k == ID) m.macro_params.insert(m.t[j].s);
        m.launches();
        std::string body = "#";
        for (const std::string &x : m.out) body += x;
        r.out[i] = body;
    }
    r.launches();
    r.shared();
    r.pointers();
    std::string res = "#line 1 \"" + std::string(argv[1]) + "\"\n";
    for (const std::string &s : r.out) res += s;
    std::ofstream o(argv[2], std::ios::binary);
    o << res;
    if (!o) {
        fprintf(stderr, "error: cannot write %s\n", argv[2]);
        return 2;
    }
    return 0;
}
