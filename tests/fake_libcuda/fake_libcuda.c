/* A stand-in for libcuda.so.1, for testing `gpulaunch check` on machines without a GPU.
 *
 * It knows the machine's GPUs from FAKE_CUDA_UUIDS (comma-separated GPU-/MIG- UUIDs in PCI order)
 * and applies a subset of CUDA's CUDA_VISIBLE_DEVICES rules: indices into that list, or full UUIDs;
 * it stops at the first entry it cannot resolve. FAKE_CUDA_REVERSE=1 reverses the order it reports
 * (a driver that disagrees with gpulaunch), FAKE_CUDA_INIT_ERROR=N makes cuInit return N.
 * Only the entry points the probe calls exist. Built with -DV1_ONLY it exports the older
 * cuDeviceGetUuid instead of cuDeviceGetUuid_v2, like drivers before CUDA 11.4. Built with -DINIT_ONLY
 * it exports cuInit alone, like a stub that is no driver (NVIDIA's mock libcuda has no cuDeviceGetCount).
 */
#include <stdlib.h>
#include <string.h>
#include <stdio.h>
#include <ctype.h>

#define MAXDEV 64
static char uuids[MAXDEV][80];
static int count = 0;

static int hexval(char c) { return isdigit((unsigned char)c) ? c - '0' : tolower((unsigned char)c) - 'a' + 10; }

static int known(const char *token, char all[][80], int n) {
    for (int i = 0; i < n; i++)
        if (strcasecmp(token, all[i]) == 0) return i;
    return -1;
}

int cuInit(unsigned int flags) {
    (void)flags;
    const char *err = getenv("FAKE_CUDA_INIT_ERROR");
    if (err) return atoi(err);
    char all[MAXDEV][80];
    int n = 0;
    char buf[8192];
    const char *src = getenv("FAKE_CUDA_UUIDS");
    snprintf(buf, sizeof buf, "%s", src ? src : "");
    for (char *tok = strtok(buf, ","); tok && n < MAXDEV; tok = strtok(NULL, ","))
        snprintf(all[n++], 80, "%s", tok);
    const char *cvd = getenv("CUDA_VISIBLE_DEVICES");
    count = 0;
    if (!cvd) {
        for (int i = 0; i < n; i++) snprintf(uuids[count++], 80, "%s", all[i]);
    } else {
        snprintf(buf, sizeof buf, "%s", cvd);
        for (char *tok = strtok(buf, ","); tok && count < MAXDEV; tok = strtok(NULL, ",")) {
            int i = isdigit((unsigned char)tok[0]) ? atoi(tok) : known(tok, all, n);
            if (i < 0 || i >= n) break;
            snprintf(uuids[count++], 80, "%s", all[i]);
        }
    }
    if (getenv("FAKE_CUDA_REVERSE"))
        for (int i = 0; i < count / 2; i++) {
            char t[80];
            memcpy(t, uuids[i], 80); memcpy(uuids[i], uuids[count - 1 - i], 80); memcpy(uuids[count - 1 - i], t, 80);
        }
    return count == 0 ? 100 : 0; /* CUDA_ERROR_NO_DEVICE */
}

#ifndef INIT_ONLY
int cuDeviceGetCount(int *n) { *n = count; return 0; }
int cuDeviceGet(int *dev, int ordinal) { if (ordinal < 0 || ordinal >= count) return 101; *dev = ordinal; return 0; }

#ifdef V1_ONLY
int cuDeviceGetUuid(unsigned char *out, int dev) {
#else
int cuDeviceGetUuid_v2(unsigned char *out, int dev) {
#endif
    if (dev < 0 || dev >= count) return 101;
    const char *p = uuids[dev] + 4; /* skip GPU-/MIG- */
    int k = 0;
    for (; *p && k < 16; p++) {
        if (*p == '-') continue;
        if (!p[1]) return 1;
        out[k++] = (unsigned char)(hexval(p[0]) * 16 + hexval(p[1]));
        p++;
    }
    return k == 16 ? 0 : 1;
}

int cuDeviceGetName(char *name, int len, int dev) { snprintf(name, len, "Fake GPU %d", dev); return 0; }
int cuGetErrorName(int rc, const char **text) { (void)rc; *text = "CUDA_ERROR_FAKE"; return 0; }
#endif
