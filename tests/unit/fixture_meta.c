/*
 * fixture_meta.c - the unit tests' meta store in a scratch directory
 * (fixture_meta.h).
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fixture.h"
#include "fixture_meta.h"
#include "meta/meta.h"

static void capture(void *ctx, uint64_t seq, const void *change, size_t len)
{
	struct nrs_fixture_meta *f = ctx;
	struct nrs_fixture_change *c;

	if (f->n >= NRS_FIXTURE_MAXLOG) {
		f->lost++;
		return;
	}
	c = &f->log[f->n++];
	c->seq = seq;
	c->len = len;
	c->p = malloc(len ? len : 1);
	if (c->p)
		memcpy(c->p, change, len);
}

int nrs_fixture_meta_open(struct nrs_fixture_meta *f, const char *name,
			  bool want_log)
{
	int rc;

	memset(f, 0, sizeof(*f));
	rc = nrs_fixture_mkdtemp(f->dir, sizeof(f->dir), name);
	if (rc)
		return rc;
	if (snprintf(f->path, sizeof(f->path), "%s/meta.db", f->dir) >=
	    (int)sizeof(f->path) ||
	    snprintf(f->path2, sizeof(f->path2), "%s/restored.db", f->dir) >=
	    (int)sizeof(f->path2))
		rc = -ENAMETOOLONG;
	if (!rc)
		rc = nrs_meta_open(f->path, &f->m);
	if (!rc && want_log)
		rc = nrs_meta_log_set(f->m, capture, f);
	if (rc)
		nrs_fixture_meta_close(f);
	return rc;
}

void nrs_fixture_meta_close(struct nrs_fixture_meta *f)
{
	if (f->m)
		nrs_meta_close(f->m);
	f->m = NULL;
	for (size_t i = 0; i < f->n; i++)
		free(f->log[i].p);
	f->n = 0;
	if (f->dir[0])
		nrs_fixture_rmtree(f->dir);
	f->dir[0] = '\0';
}

struct nrs_fixture_meta *nrs_fixture_meta_new(const char *name, bool capture)
{
	struct nrs_fixture_meta *f = malloc(sizeof(*f));

	if (f && nrs_fixture_meta_open(f, name, capture)) {
		free(f);
		f = NULL;
	}
	return f;
}

void nrs_fixture_meta_free(struct nrs_fixture_meta *f)
{
	if (!f)
		return;
	nrs_fixture_meta_close(f);
	free(f);
}
