/* test_log.c - log.c: every message is one line with control and non-ASCII
 * bytes escaped (LG1); a call site repeated writes a bounded number of
 * lines and then one "... N more" summary (LG2); a daemon not yet detached
 * logs to standard error and syslog, then to syslog alone (LG3). */
#include "config.h"
/* syslog(3) is this test's own (below): no fortified inline of it */
#undef _FORTIFY_SOURCE

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <syslog.h>
#include <unistd.h>

#include "util/log.h"

static char out[1 << 20];

/* Run fn with standard error into a file; its text into out, returns the
 * number of lines. */
static int capture(void (*fn)(void))
{
	FILE *f = tmpfile();
	int saved = dup(STDERR_FILENO), lines = 0;
	size_t n;

	assert_non_null(f);
	assert_true(saved >= 0);
	assert_true(dup2(fileno(f), STDERR_FILENO) >= 0);
	fn();
	assert_true(dup2(saved, STDERR_FILENO) >= 0);
	close(saved);
	rewind(f);
	n = fread(out, 1, sizeof(out) - 1, f);
	out[n] = '\0';
	fclose(f);
	for (size_t i = 0; i < n; i++)
		lines += out[i] == '\n';
	return lines;
}

static void log_hostile(void)
{
	nrs_warn("name %s end", "a\nnereusfs[1]: error: forged\x1b[2J\x7f\xc3\xa9\\z\t");
}

static void test_escape(void **state)
{
	char buf[16];

	(void)state;
	assert_int_equal(capture(log_hostile), 1);
	assert_non_null(strstr(out, ": warning: name a\\x0anereusfs[1]: error: "
			       "forged\\x1b[2J\\x7f\\xc3\\xa9\\\\z\\x09 end\n"));
	/* a cut never splits an escape */
	assert_int_equal(nrs_log_escape(buf, sizeof(buf), "abcdefghijk\n"), 15);
	assert_string_equal(buf, "abcdefghijk\\x0a");
	assert_int_equal(nrs_log_escape(buf, sizeof(buf), "abcdefghijkl\n"), 12);
	assert_string_equal(buf, "abcdefghijkl");
	assert_int_equal(nrs_log_escape(buf, 5, "\n"), 4);
	assert_string_equal(buf, "\\x0a");
	assert_int_equal(nrs_log_escape(buf, 4, "\n"), 0);
	assert_string_equal(buf, "");
	assert_int_equal(nrs_log_escape(buf, 3, "\\"), 2);
	assert_string_equal(buf, "\\\\");
	assert_int_equal(nrs_log_escape(buf, 1, "a"), 0);
}

static void log_many(void)
{
	for (int i = 0; i < 20000; i++)
		nrs_warn("inode %d: no attribute %s", i, "user.nereus.x");
	nrs_info("another site");
	nrs_log_flush(false);	/* the window is not over: nothing yet */
}

static void flush_all(void)
{
	nrs_log_flush(true);
}

static void test_rate(void **state)
{
	char want[128];

	(void)state;
	/* the burst, and the other site, which has its own */
	assert_int_equal(capture(log_many), NRS_LOG_BURST + 1);
	assert_non_null(strstr(out, "inode 0: no attribute user.nereus.x\n"));
	assert_null(strstr(out, "inode 10000:"));
	assert_non_null(strstr(out, "another site\n"));
	assert_null(strstr(out, "more in the last"));
	/* one line sums up the rest, naming the last of them */
	assert_int_equal(capture(flush_all), 1);
	snprintf(want, sizeof(want), ": warning: ... %d more in the last %d s: "
		 "inode 19999: no attribute user.nereus.x\n",
		 20000 - NRS_LOG_BURST, NRS_LOG_WINDOW_S);
	assert_non_null(strstr(out, want));
	assert_int_equal(capture(flush_all), 0);
}

/* More sites than the table holds (256): each still gets its lines, and
 * an evicted site's count is written, not lost. */
static const char *const site_fmts[] = {
	"site 0 %d",
	"site 1 %d",
	"site 2 %d",
	"site 3 %d",
	"site 4 %d",
	"site 5 %d",
	"site 6 %d",
	"site 7 %d",
	"site 8 %d",
	"site 9 %d",
	"site 10 %d",
	"site 11 %d",
	"site 12 %d",
	"site 13 %d",
	"site 14 %d",
	"site 15 %d",
	"site 16 %d",
	"site 17 %d",
	"site 18 %d",
	"site 19 %d",
	"site 20 %d",
	"site 21 %d",
	"site 22 %d",
	"site 23 %d",
	"site 24 %d",
	"site 25 %d",
	"site 26 %d",
	"site 27 %d",
	"site 28 %d",
	"site 29 %d",
	"site 30 %d",
	"site 31 %d",
	"site 32 %d",
	"site 33 %d",
	"site 34 %d",
	"site 35 %d",
	"site 36 %d",
	"site 37 %d",
	"site 38 %d",
	"site 39 %d",
	"site 40 %d",
	"site 41 %d",
	"site 42 %d",
	"site 43 %d",
	"site 44 %d",
	"site 45 %d",
	"site 46 %d",
	"site 47 %d",
	"site 48 %d",
	"site 49 %d",
	"site 50 %d",
	"site 51 %d",
	"site 52 %d",
	"site 53 %d",
	"site 54 %d",
	"site 55 %d",
	"site 56 %d",
	"site 57 %d",
	"site 58 %d",
	"site 59 %d",
	"site 60 %d",
	"site 61 %d",
	"site 62 %d",
	"site 63 %d",
	"site 64 %d",
	"site 65 %d",
	"site 66 %d",
	"site 67 %d",
	"site 68 %d",
	"site 69 %d",
	"site 70 %d",
	"site 71 %d",
	"site 72 %d",
	"site 73 %d",
	"site 74 %d",
	"site 75 %d",
	"site 76 %d",
	"site 77 %d",
	"site 78 %d",
	"site 79 %d",
	"site 80 %d",
	"site 81 %d",
	"site 82 %d",
	"site 83 %d",
	"site 84 %d",
	"site 85 %d",
	"site 86 %d",
	"site 87 %d",
	"site 88 %d",
	"site 89 %d",
	"site 90 %d",
	"site 91 %d",
	"site 92 %d",
	"site 93 %d",
	"site 94 %d",
	"site 95 %d",
	"site 96 %d",
	"site 97 %d",
	"site 98 %d",
	"site 99 %d",
	"site 100 %d",
	"site 101 %d",
	"site 102 %d",
	"site 103 %d",
	"site 104 %d",
	"site 105 %d",
	"site 106 %d",
	"site 107 %d",
	"site 108 %d",
	"site 109 %d",
	"site 110 %d",
	"site 111 %d",
	"site 112 %d",
	"site 113 %d",
	"site 114 %d",
	"site 115 %d",
	"site 116 %d",
	"site 117 %d",
	"site 118 %d",
	"site 119 %d",
	"site 120 %d",
	"site 121 %d",
	"site 122 %d",
	"site 123 %d",
	"site 124 %d",
	"site 125 %d",
	"site 126 %d",
	"site 127 %d",
	"site 128 %d",
	"site 129 %d",
	"site 130 %d",
	"site 131 %d",
	"site 132 %d",
	"site 133 %d",
	"site 134 %d",
	"site 135 %d",
	"site 136 %d",
	"site 137 %d",
	"site 138 %d",
	"site 139 %d",
	"site 140 %d",
	"site 141 %d",
	"site 142 %d",
	"site 143 %d",
	"site 144 %d",
	"site 145 %d",
	"site 146 %d",
	"site 147 %d",
	"site 148 %d",
	"site 149 %d",
	"site 150 %d",
	"site 151 %d",
	"site 152 %d",
	"site 153 %d",
	"site 154 %d",
	"site 155 %d",
	"site 156 %d",
	"site 157 %d",
	"site 158 %d",
	"site 159 %d",
	"site 160 %d",
	"site 161 %d",
	"site 162 %d",
	"site 163 %d",
	"site 164 %d",
	"site 165 %d",
	"site 166 %d",
	"site 167 %d",
	"site 168 %d",
	"site 169 %d",
	"site 170 %d",
	"site 171 %d",
	"site 172 %d",
	"site 173 %d",
	"site 174 %d",
	"site 175 %d",
	"site 176 %d",
	"site 177 %d",
	"site 178 %d",
	"site 179 %d",
	"site 180 %d",
	"site 181 %d",
	"site 182 %d",
	"site 183 %d",
	"site 184 %d",
	"site 185 %d",
	"site 186 %d",
	"site 187 %d",
	"site 188 %d",
	"site 189 %d",
	"site 190 %d",
	"site 191 %d",
	"site 192 %d",
	"site 193 %d",
	"site 194 %d",
	"site 195 %d",
	"site 196 %d",
	"site 197 %d",
	"site 198 %d",
	"site 199 %d",
	"site 200 %d",
	"site 201 %d",
	"site 202 %d",
	"site 203 %d",
	"site 204 %d",
	"site 205 %d",
	"site 206 %d",
	"site 207 %d",
	"site 208 %d",
	"site 209 %d",
	"site 210 %d",
	"site 211 %d",
	"site 212 %d",
	"site 213 %d",
	"site 214 %d",
	"site 215 %d",
	"site 216 %d",
	"site 217 %d",
	"site 218 %d",
	"site 219 %d",
	"site 220 %d",
	"site 221 %d",
	"site 222 %d",
	"site 223 %d",
	"site 224 %d",
	"site 225 %d",
	"site 226 %d",
	"site 227 %d",
	"site 228 %d",
	"site 229 %d",
	"site 230 %d",
	"site 231 %d",
	"site 232 %d",
	"site 233 %d",
	"site 234 %d",
	"site 235 %d",
	"site 236 %d",
	"site 237 %d",
	"site 238 %d",
	"site 239 %d",
	"site 240 %d",
	"site 241 %d",
	"site 242 %d",
	"site 243 %d",
	"site 244 %d",
	"site 245 %d",
	"site 246 %d",
	"site 247 %d",
	"site 248 %d",
	"site 249 %d",
	"site 250 %d",
	"site 251 %d",
	"site 252 %d",
	"site 253 %d",
	"site 254 %d",
	"site 255 %d",
	"site 256 %d",
	"site 257 %d",
	"site 258 %d",
	"site 259 %d",
	"site 260 %d",
	"site 261 %d",
	"site 262 %d",
	"site 263 %d",
	"site 264 %d",
	"site 265 %d",
	"site 266 %d",
	"site 267 %d",
	"site 268 %d",
	"site 269 %d",
	"site 270 %d",
	"site 271 %d",
	"site 272 %d",
	"site 273 %d",
	"site 274 %d",
	"site 275 %d",
	"site 276 %d",
	"site 277 %d",
	"site 278 %d",
	"site 279 %d",
	"site 280 %d",
	"site 281 %d",
	"site 282 %d",
	"site 283 %d",
	"site 284 %d",
	"site 285 %d",
	"site 286 %d",
	"site 287 %d",
	"site 288 %d",
	"site 289 %d",
	"site 290 %d",
	"site 291 %d",
	"site 292 %d",
	"site 293 %d",
	"site 294 %d",
	"site 295 %d",
	"site 296 %d",
	"site 297 %d",
	"site 298 %d",
	"site 299 %d"
};
#define NSITES ((int)(sizeof(site_fmts) / sizeof(site_fmts[0])))

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wformat-nonliteral"
static void log_sites(void)
{
	for (int i = 0; i < NSITES; i++)
		for (int k = 0; k < NRS_LOG_BURST + 3; k++)
			nrs_log(NRS_LOG_WARN, site_fmts[i], k);
	nrs_log_flush(true);
}
#pragma GCC diagnostic pop

static void test_sites(void **state)
{
	(void)state;
	/* each site its burst and one summary of 3 more */
	assert_int_equal(capture(log_sites), NSITES * (NRS_LOG_BURST + 1));
	assert_non_null(strstr(out, "... 3 more in the last 10 s: site 0 12\n"));
	assert_non_null(strstr(out, "... 3 more in the last 10 s: site 299 12\n"));
}

/* LG3: the lines log.c hands to syslog, one a line. */
static char sys_out[4096];

static void sys_record(const char *fmt, va_list ap)
	__attribute__((format(printf, 1, 0)));
static void sys_record(const char *fmt, va_list ap)
{
	size_t n = strlen(sys_out);

	vsnprintf(sys_out + n, sizeof(sys_out) - n - 1, fmt, ap);
	strcat(sys_out, "\n");
}

void openlog(const char *ident, int option, int facility)
{
	(void)ident;
	(void)option;
	(void)facility;
}

void syslog(int pri, const char *fmt, ...)
{
	va_list ap;

	(void)pri;
	va_start(ap, fmt);
	sys_record(fmt, ap);
	va_end(ap);
}

void __syslog_chk(int pri, int flag, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
void __syslog_chk(int pri, int flag, const char *fmt, ...)
{
	va_list ap;

	(void)pri;
	(void)flag;
	va_start(ap, fmt);
	sys_record(fmt, ap);
	va_end(ap);
}

static void log_detach(void)
{
	nrs_log_to_syslog(true);	/* started without -f, not detached */
	nrs_info("recovery: progress: objects read %d", 3);
	nrs_log_to_syslog(false);	/* detached */
	nrs_info("mounted %s", "/mnt");
}

/* LG3 (last: log.c logs to syslog from now on) */
static void test_syslog(void **state)
{
	(void)state;
	assert_int_equal(capture(log_detach), 1);
	assert_non_null(strstr(out, ": info: recovery: progress: objects read 3\n"));
	assert_null(strstr(out, "mounted"));
	assert_non_null(strstr(sys_out, "info: recovery: progress: objects "
			       "read 3\ninfo: mounted /mnt\n"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_escape),
		cmocka_unit_test(test_rate),
		cmocka_unit_test(test_sites),
		cmocka_unit_test(test_syslog),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
