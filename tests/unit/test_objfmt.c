/*
 * test_objfmt.c - the segment object format: seal/verify round trips at
 * block edges, the header bytes at their documented offsets, detection of
 * every single-bit flip, identity and version checks, the key string,
 * digests against sha256sum/md5sum, and refusal of impossible input.
 */
#include "config.h"

#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "obj/objfmt.h"
#include "util/crc32c.h"
#include "util/le.h"
#include "wal/wal.h"

static unsigned char pattern(uint64_t i)
{
	return (unsigned char)(i * 7 + 3);
}

/* A sealed object of h's range with pattern() bytes; the caller frees. */
static unsigned char *make_obj(const struct nrs_objhdr *h, size_t *len)
{
	uint64_t plen = h->end - h->start;
	size_t hl = nrs_objfmt_hdr_len(plen);
	unsigned char *b = malloc(hl + plen);

	assert_non_null(b);
	for (uint64_t i = 0; i < plen; i++)
		b[hl + i] = pattern(h->start + i);
	assert_int_equal(nrs_objfmt_seal(b, h), 0);
	*len = hl + plen;
	return b;
}

static void test_hdr_len(void **state)
{
	(void)state;
	assert_int_equal(nrs_objfmt_hdr_len(1), 68);
	assert_int_equal(nrs_objfmt_hdr_len(65535), 68);
	assert_int_equal(nrs_objfmt_hdr_len(65536), 68);
	assert_int_equal(nrs_objfmt_hdr_len(65537), 72);
	assert_int_equal(nrs_objfmt_hdr_len(NRS_OBJ_MAX_LEN - 1),
			 64 + 4 * 65536);
	assert_int_equal(nrs_objfmt_nblocks(3 * 65536 + 1), 4);
}

static void test_round_trip(void **state)
{
	static const uint64_t sizes[] = {
		1, 65535, 65536, 65537, 3 * 65536 + 123, 5 * 65536ull,
	};

	(void)state;
	for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
		struct nrs_objhdr h = {
			.stream_id = 42 + k, .start = 1000 * k + 7,
			.end = 1000 * k + 7 + sizes[k], .gen = 3,
		};
		struct nrs_objinfo oi;
		unsigned char *b, *grown;
		size_t len, hl = nrs_objfmt_hdr_len(sizes[k]);

		b = make_obj(&h, &len);
		assert_int_equal(nrs_objfmt_verify(b, len, &h), 0);
		assert_int_equal(nrs_objfmt_verify(b, len, NULL), 0);

		/* Piecewise, as a reader that fetches ranges does. */
		assert_int_equal(nrs_objfmt_parse(b, hl, &h, &oi), 0);
		assert_int_equal(oi.nblocks, nrs_objfmt_nblocks(sizes[k]));
		assert_memory_equal(&oi.h, &h, sizeof(h));
		assert_int_equal(nrs_objfmt_verify_table(&oi, b + NRS_OBJ_FIXED),
				 0);
		for (uint32_t i = 0; i < oi.nblocks; i++) {
			size_t bl = nrs_objfmt_block_len(&oi, i);

			assert_true(bl > 0 && bl <= NRS_OBJ_BLOCK);
			assert_int_equal(nrs_objfmt_verify_block(&oi,
					b + NRS_OBJ_FIXED, i,
					b + hl + (size_t)i * NRS_OBJ_BLOCK, bl),
					0);
			/* A block of the wrong length is never right. */
			assert_int_equal(nrs_objfmt_verify_block(&oi,
					b + NRS_OBJ_FIXED, i,
					b + hl + (size_t)i * NRS_OBJ_BLOCK,
					bl - 1), -EBADMSG);
		}
		assert_int_equal(nrs_objfmt_block_len(&oi, oi.nblocks), 0);
		assert_int_equal(nrs_objfmt_verify_block(&oi, b + NRS_OBJ_FIXED,
					oi.nblocks, b + hl, 1), -EINVAL);

		/* Cut short or grown by a byte: not the object. */
		assert_int_equal(nrs_objfmt_verify(b, len - 1, &h), -EBADMSG);
		grown = malloc(len + 1);
		assert_non_null(grown);
		memcpy(grown, b, len);
		grown[len] = 0;
		assert_int_equal(nrs_objfmt_verify(grown, len + 1, &h),
				 -EBADMSG);
		free(grown);
		free(b);
	}
}

/* The fixed header at the offsets objfmt.c documents. */
static void test_layout(void **state)
{
	struct nrs_objhdr h = {
		.stream_id = 0x0102030405060708ull, .start = 0x1000,
		.end = 0x1000 + 65537, .gen = 9,
	};
	unsigned char *b;
	size_t len;

	(void)state;
	b = make_obj(&h, &len);
	assert_memory_equal(b, "NRSO", 4);
	assert_int_equal(nrs_le16_get(b + 4), 1);
	assert_int_equal(nrs_le16_get(b + 6), 0);
	assert_int_equal(nrs_le32_get(b + 8), 65536);
	assert_int_equal(nrs_le32_get(b + 12), 2);
	assert_true(nrs_le64_get(b + 16) == h.stream_id);
	assert_true(b[16] == 0x08 && b[23] == 0x01);	/* little-endian */
	assert_true(nrs_le64_get(b + 24) == h.start);
	assert_true(nrs_le64_get(b + 32) == h.end);
	assert_true(nrs_le64_get(b + 40) == h.gen);
	assert_int_equal(nrs_le32_get(b + 48), nrs_crc32c(0, b + 64, 8));
	assert_int_equal(nrs_le32_get(b + 52), 0);
	assert_int_equal(nrs_le32_get(b + 56), 0);
	assert_int_equal(nrs_le32_get(b + 60), nrs_crc32c(0, b, 60));
	assert_int_equal(nrs_le32_get(b + 64), nrs_crc32c(0, b + 72, 65536));
	assert_int_equal(nrs_le32_get(b + 68),
			 nrs_crc32c(0, b + 72 + 65536, 1));
	assert_int_equal(len, 72 + 65537);
	free(b);
}

static void flip_all_bits(unsigned char *b, size_t len, size_t from,
			  size_t to, const struct nrs_objhdr *h)
{
	for (size_t i = from; i < to; i++) {
		for (int bit = 0; bit < 8; bit++) {
			b[i] ^= (unsigned char)(1u << bit);
			if (nrs_objfmt_verify(b, len, h) != -EBADMSG)
				fail_msg("flip of byte %zu bit %d not caught",
					 i, bit);
			b[i] ^= (unsigned char)(1u << bit);
		}
	}
	assert_int_equal(nrs_objfmt_verify(b, len, h), 0);
}

static void test_bit_flips(void **state)
{
	struct nrs_objhdr small = { .stream_id = 5, .start = 10, .end = 110,
				    .gen = 1 };
	struct nrs_objhdr big = { .stream_id = 5, .start = 0,
				  .end = 3 * 65536 + 17, .gen = 2 };
	unsigned char *b;
	size_t len, hl;

	(void)state;
	/* Every bit of a small object: header, table and payload. */
	b = make_obj(&small, &len);
	flip_all_bits(b, len, 0, len, &small);
	free(b);

	/* Several blocks: every bit of header and table, and every bit of
	 * the first and last bytes of each block and around each edge. */
	b = make_obj(&big, &len);
	hl = nrs_objfmt_hdr_len(big.end - big.start);
	flip_all_bits(b, len, 0, hl, &big);
	for (size_t blk = 0; blk < 4; blk++) {
		size_t at = hl + blk * NRS_OBJ_BLOCK;

		flip_all_bits(b, len, at, at + 2, &big);
		if (blk > 0)
			flip_all_bits(b, len, at - 2, at, &big);
	}
	flip_all_bits(b, len, len - 1, len, &big);
	free(b);
}

static void test_identity(void **state)
{
	struct nrs_objhdr h = { .stream_id = 7, .start = 100, .end = 300,
				.gen = 4 };
	unsigned char *b;
	size_t len;

	(void)state;
	b = make_obj(&h, &len);
	for (int k = 0; k < 4; k++) {
		struct nrs_objhdr w = h;
		uint64_t *field[] = { &w.stream_id, &w.start, &w.end, &w.gen };

		(*field[k])++;
		assert_int_equal(nrs_objfmt_verify(b, len, &w), -EUCLEAN);
	}
	free(b);
}

/* Rewrite a header field and its CRC, as a writer (not rot) would. */
static void rewrite(unsigned char *b, size_t off, size_t width, uint64_t v)
{
	if (width == 2)
		nrs_le16_put(b + off, (uint16_t)v);
	else if (width == 4)
		nrs_le32_put(b + off, (uint32_t)v);
	else
		nrs_le64_put(b + off, v);
	nrs_le32_put(b + 60, nrs_crc32c(0, b, 60));
}

static void test_versions_and_fields(void **state)
{
	struct nrs_objhdr h = { .stream_id = 7, .start = 100, .end = 300,
				.gen = 4 };
	struct nrs_objinfo oi = { .nblocks = 99 };
	unsigned char *b, *c;
	size_t len;

	(void)state;
	b = make_obj(&h, &len);
	c = malloc(len);
	assert_non_null(c);

	/* A newer, intact header is refused, not misread. */
	memcpy(c, b, len);
	rewrite(c, 4, 2, 2);
	assert_int_equal(nrs_objfmt_verify(c, len, &h), -EPROTO);
	assert_int_equal(nrs_objfmt_parse(c, len, &h, &oi), -EPROTO);
	assert_int_equal(oi.nblocks, 99);	/* untouched on failure */

	/* Fields no version-1 writer produces, under a good CRC. */
	static const struct { size_t off, width; uint64_t v; } bad[] = {
		{ 6, 2, 1 },		/* reserved */
		{ 8, 4, 4096 },		/* block size */
		{ 12, 4, 2 },		/* nblocks */
		{ 32, 8, 100 },		/* end == start */
		{ 32, 8, 99 },		/* end < start */
		{ 40, 8, 0 },		/* gen 0 */
		{ 52, 4, 1 },		/* reserved */
		{ 56, 4, 1 },		/* reserved */
	};
	for (size_t k = 0; k < sizeof(bad) / sizeof(bad[0]); k++) {
		memcpy(c, b, len);
		rewrite(c, bad[k].off, bad[k].width, bad[k].v);
		assert_int_equal(nrs_objfmt_verify(c, len, NULL), -EUCLEAN);
	}

	/* A payload of 2^32 bytes or more cannot be described. */
	memcpy(c, b, len);
	rewrite(c, 32, 8, 100 + NRS_OBJ_MAX_LEN);
	assert_int_equal(nrs_objfmt_parse(c, 64, NULL, &oi), -EUCLEAN);

	/* Too short for a fixed header; bad magic. */
	assert_int_equal(nrs_objfmt_parse(b, 63, NULL, &oi), -EBADMSG);
	memcpy(c, b, len);
	c[0] = 'X';
	nrs_le32_put(c + 60, nrs_crc32c(0, c, 60));
	assert_int_equal(nrs_objfmt_verify(c, len, NULL), -EBADMSG);
	free(c);
	free(b);
}

static void test_key(void **state)
{
	char key[NRS_OBJKEY_MAX];
	struct nrs_objhdr h = { .stream_id = 0x2a, .start = 0x10000,
				.end = 0x20000, .gen = 3 };
	struct nrs_objhdr big = { .stream_id = UINT64_MAX,
				  .start = UINT64_MAX - 2,
				  .end = UINT64_MAX - 1, .gen = UINT64_MAX };
	const char *want = "s/000000000000002a/0000000000010000-"
			   "0000000000020000-g0000000000000003";

	(void)state;
	assert_int_equal(nrs_objfmt_key(key, &h), (int)strlen(want));
	assert_string_equal(key, want);
	assert_int_equal(nrs_objfmt_key(key, &big), 70);
	assert_string_equal(key, "s/ffffffffffffffff/fffffffffffffffd-"
				 "fffffffffffffffe-gffffffffffffffff");
}

/* An adopted local WAL segment's key; MZ13: a WAL object's is the object
 * WAL's own key of it (wal_object.c ow_key), for every run it adopts. */
static void test_adopt_key(void **state)
{
	static const uint64_t segs[] = { (uint64_t)1 << 40 | 1,
		(uint64_t)0x2a << 40 | 0xfffffffffful,
		(((uint64_t)1 << 22) - 1) << 40 | 7 };
	char key[NRS_OBJKEY_MAX], want[NRS_OBJKEY_MAX];

	(void)state;
	assert_int_equal(nrs_objfmt_adopt_key(key, 0x1f), 18);
	assert_string_equal(key, "w/000000000000001f");
	for (size_t i = 0; i < sizeof(segs) / sizeof(segs[0]); i++) {
		nrs_wal_object_key(want, segs[i]);
		nrs_objfmt_adopt_key(key, NRS_ADOPT_OWAL | segs[i]);
		assert_string_equal(key, want);
	}
}

static void hex(const unsigned char *d, size_t n, char *out)
{
	for (size_t i = 0; i < n; i++)
		sprintf(out + 2 * i, "%02x", d[i]);
}

static void test_digest(void **state)
{
	static const char fox[] = "The quick brown fox jumps over the lazy dog";
	unsigned char sha[NRS_SHA256_LEN], md5[NRS_MD5_LEN];
	char text[2 * NRS_SHA256_LEN + 1];
	size_t big_len = 3 * 1024 * 1024 + 5;
	unsigned char *big = malloc(big_len);

	(void)state;
	assert_non_null(big);
	assert_int_equal(nrs_objfmt_digest(fox, strlen(fox), sha, md5), 0);
	hex(sha, sizeof(sha), text);
	assert_string_equal(text, "d7a8fbb307d7809469ca9abcb0082e4f"
				  "8d5651e46d3cdb762d02d0bf37c9e592");
	hex(md5, sizeof(md5), text);
	assert_string_equal(text, "9e107d9d372bb6826bd81d3542a419d6");

	assert_int_equal(nrs_objfmt_digest(NULL, 0, sha, md5), 0);
	hex(sha, sizeof(sha), text);
	assert_string_equal(text, "e3b0c44298fc1c149afbf4c8996fb924"
				  "27ae41e4649b934ca495991b7852b855");
	hex(md5, sizeof(md5), text);
	assert_string_equal(text, "d41d8cd98f00b204e9800998ecf8427e");

	/* Longer than the piece the digest is fed in; one output only. */
	for (size_t i = 0; i < big_len; i++)
		big[i] = pattern(i);
	memset(md5, 0, sizeof(md5));
	assert_int_equal(nrs_objfmt_digest(big, big_len, sha, NULL), 0);
	hex(sha, sizeof(sha), text);
	assert_string_equal(text, "8e412f5c2133ab91c007c92ac99185bd"
				  "7aeb01a1b4fc67f38cb9d9052f614a3f");
	assert_int_equal(nrs_objfmt_digest(big, big_len, NULL, md5), 0);
	hex(md5, sizeof(md5), text);
	assert_string_equal(text, "88fa70d4a9d46da8b3561f475f808424");
	free(big);
}

static void test_bad_input(void **state)
{
	unsigned char buf[256] = { 0 };
	unsigned char sha[NRS_SHA256_LEN];
	char key[NRS_OBJKEY_MAX];
	struct nrs_objinfo oi;
	static const struct nrs_objhdr bad[] = {
		{ .stream_id = 1, .start = 5, .end = 5, .gen = 1 },
		{ .stream_id = 1, .start = 6, .end = 5, .gen = 1 },
		{ .stream_id = 1, .start = 0, .end = 5, .gen = 0 },
		{ .stream_id = 1, .start = 0, .end = NRS_OBJ_MAX_LEN, .gen = 1 },
	};
	struct nrs_objhdr ok = { .stream_id = 1, .start = 0, .end = 5,
				 .gen = 1 };

	(void)state;
	for (size_t k = 0; k < sizeof(bad) / sizeof(bad[0]); k++) {
		assert_int_equal(nrs_objfmt_seal(buf, &bad[k]), -EINVAL);
		assert_int_equal(nrs_objfmt_key(key, &bad[k]), -EINVAL);
	}
	assert_int_equal(nrs_objfmt_seal(NULL, &ok), -EINVAL);
	assert_int_equal(nrs_objfmt_seal(buf, NULL), -EINVAL);
	assert_int_equal(nrs_objfmt_key(key, NULL), -EINVAL);
	assert_int_equal(nrs_objfmt_digest(NULL, 1, sha, NULL), -EINVAL);
	assert_int_equal(nrs_objfmt_digest(buf, 1, NULL, NULL), -EINVAL);
	assert_int_equal(nrs_objfmt_verify(NULL, 10, &ok), -EINVAL);
	assert_int_equal(nrs_objfmt_parse(NULL, 64, NULL, &oi), -EINVAL);
	assert_int_equal(nrs_objfmt_parse(buf, 64, NULL, NULL), -EINVAL);
	assert_int_equal(nrs_objfmt_verify_table(NULL, buf), -EINVAL);
	/* All zeros is no object. */
	assert_int_equal(nrs_objfmt_verify(buf, sizeof(buf), NULL), -EBADMSG);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_hdr_len),
		cmocka_unit_test(test_round_trip),
		cmocka_unit_test(test_layout),
		cmocka_unit_test(test_bit_flips),
		cmocka_unit_test(test_identity),
		cmocka_unit_test(test_versions_and_fields),
		cmocka_unit_test(test_key),
		cmocka_unit_test(test_adopt_key),
		cmocka_unit_test(test_digest),
		cmocka_unit_test(test_bad_input),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
