/* policy.c — the execution policy record in words (policy.h). */
#include "ops/policy.h"

#include <stdio.h>

#include "dormouse.h"

/* ---- the precision record's line (ops/precision.h) ---- */

void dm_precision_describe(const dm_precision *p, char *buf, size_t n) {
    const char *why = p->matmul_why ? p->matmul_why : p->ns_why;
    const char *via = p->matmul_bf16 ? p->matmul_via : NULL;
    snprintf(buf, n, "matmuls %s%s%s%s, Newton-Schulz %s%s%s%s", p->matmul_bf16 ? "bf16" : "fp32",
             via ? " (on " : "", via ? via : "", via ? ")" : "", p->ns_bf16 ? "bf16" : "fp32",
             why ? " (" : "", why ? why : "", why ? ")" : "");
}

/* ---- the policy ---- */

static const char *gemm_name(int g) { return g == DM_GEMM_ONEDNN ? "onednn" : "openblas"; }
static const char *impl_name(int i, const char *fast) {
    return i == DM_IMPL_REFERENCE ? "reference" : fast;
}

void dm_policy_describe(const dm_policy *p, char *buf, size_t n) {
    char prec[256], gw[160] = "", dw[160] = "";
    dm_precision_describe(&p->prec, prec, sizeof prec);
    if (p->gemm_why) snprintf(gw, sizeof gw, " (%s)", p->gemm_why);
    if (p->delta_why) snprintf(dw, sizeof dw, " (%s)", p->delta_why);
    else if (p->delta_how) snprintf(dw, sizeof dw, " %s", p->delta_how);
    snprintf(buf, n, "%s, %d thread%s, FTZ %s, gemm %s%s, delta %s%s (chunk %d), norms %s, %s",
             p->backend, p->threads, p->threads == 1 ? "" : "s", p->ftz ? "on" : "off",
             gemm_name(p->gemm), gw, impl_name(p->delta, "chunked"), dw, p->chunk,
             impl_name(p->norm, "fused"), prec);
}

/* s as a JSON string's body: quotes and backslashes escaped, control bytes dropped */
static void jstr(char *out, size_t n, const char *s) {
    size_t k = 0;
    for (; s && *s && k + 2 < n; s++) {
        if ((unsigned char)*s < 0x20) continue;
        if (*s == '"' || *s == '\\') out[k++] = '\\';
        out[k++] = *s;
    }
    out[k] = 0;
}

void dm_policy_json(const dm_policy *p, char *buf, size_t n) {
    char gw[200], dw[200], mw[200], nw[200], mv[200];
    jstr(gw, sizeof gw, p->gemm_why);
    jstr(dw, sizeof dw, p->delta_why);
    jstr(mw, sizeof mw, p->prec.matmul_why);
    jstr(nw, sizeof nw, p->prec.ns_why);
    jstr(mv, sizeof mv, p->prec.matmul_bf16 ? p->prec.matmul_via : NULL);
    snprintf(buf, n,
             "{\"backend\": \"%s\", \"threads\": %d, \"ftz\": %s, \"gemm\": \"%s\", "
             "\"gemm_why\": \"%s\", \"delta\": \"%s\", \"delta_why\": \"%s\", \"chunk\": %d, "
             "\"norms\": \"%s\", \"matmul_precision\": \"%s\", \"matmul_why\": \"%s\", "
             "\"matmul_via\": \"%s\", \"ns_precision\": \"%s\", \"ns_why\": \"%s\"}\n",
             p->backend, p->threads, p->ftz ? "true" : "false", gemm_name(p->gemm), gw,
             impl_name(p->delta, "chunked"), dw, p->chunk, impl_name(p->norm, "fused"),
             p->prec.matmul_bf16 ? "bf16" : "fp32", mw, mv, p->prec.ns_bf16 ? "bf16" : "fp32", nw);
}
