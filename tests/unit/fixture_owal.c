/*
 * fixture_owal.c - the object WAL tests' directory and store
 * (fixture_owal.h).
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "fixture.h"
#include "fixture_owal.h"
#include "obj/objstore.h"

int nrs_fixture_owal_open(struct nrs_fixture_owal *f, const char *name)
{
	int rc;

	memset(f, 0, sizeof(*f));
	rc = nrs_fixture_mkdtemp(f->root, sizeof(f->root), name);
	if (rc)
		return rc;
	snprintf(f->objs, sizeof(f->objs), "%s/objects", f->root);
	snprintf(f->state, sizeof(f->state), "%s/owal", f->root);
	rc = nrs_objstore_dir_open(f->objs, &f->store);
	if (rc) {
		nrs_fixture_rmtree(f->root);
		return rc;
	}
	return 0;
}

int nrs_fixture_owal_close(struct nrs_fixture_owal *f)
{
	nrs_obj_close(f->store);
	f->store = NULL;
	return nrs_fixture_rmtree(f->root);
}
