/*
 * schema_undo.h - for the tests of an older schema's database (test_snapshot
 * and tests/helpers/nrs-ckpt): what each upgrade step of
 * src/meta/sqlite_schema.c added, undone, indexed by the version the step
 * starts from: nrs_schema_undo[v] turns a schema v + 1 database into
 * schema v.  A new schema step needs its line here (test_snapshot checks
 * that there is one per step).
 */
#ifndef NRS_TEST_SCHEMA_UNDO_H
#define NRS_TEST_SCHEMA_UNDO_H

static const char *const nrs_schema_undo[] = {
	NULL,
	"ALTER TABLE streams DROP COLUMN crc;",		/* 1 -> 2 */
	"DROP TABLE objects;",				/* 2 -> 3 */
	"DROP TABLE metalog;",				/* 3 -> 4 */
	"ALTER TABLE objects DROP COLUMN off;"
	"ALTER TABLE objects DROP COLUMN seg;",		/* 4 -> 5 */
};
#define NRS_SCHEMA_UNDO_N (sizeof(nrs_schema_undo) / sizeof(nrs_schema_undo[0]))

#endif
