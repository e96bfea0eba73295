/*
 * core_owner.c - the stream core and the owner of its bucket (owner.h,
 * DESIGN.md I8), at mount and after.
 *
 * MOUNT (CW1): whenever an object store is open (the embedded one too):
 *   no record              claim it (epoch 1)
 *   ours                   renew it, go on
 *   someone else's         refuse the mount (-EBUSY), unless -o recover:
 *                          then take it over (owner.c OR4, OR5: this waits
 *                          up to about two leases for the old owner to stop)
 *   not a record           refuse unless recover (-EUCLEAN)
 *   no answer              warn and go on: the renew thread claims when the
 *                          store answers (and fences the mount if it finds
 *                          someone else's record then)
 * The refusal names what happened: a data directory that owned the bucket
 * before was fenced (someone took it over); a new one finds the bucket
 * owned.
 *
 * FENCED (CW2): every append of the mount fails ESTALE (nrs_core_append),
 * and the store the materializer and the lifecycle get refuses PUT and
 * DELETE (owner_store.c OS1); reads go on.
 */
#include "config.h"

#include <errno.h>
#include <string.h>

#include "core/core_priv.h"
#include "obj/objstore.h"
#include "owner/owner.h"
#include "util/log.h"

int nrs_core_owner_open(struct nrs_core *c, const struct nrs_core_opts *o)
{
	struct nrs_owner_opts oo = {
		.store = c->store,
		.lease_ms = o->owner_lease_ms,
	};
	bool was_owner = false;
	int err;

	err = nrs_owner_id_load(c->data_dir, oo.id, &was_owner);	/* logs */
	if (err)
		return err;
	err = nrs_owner_bucket_open(&oo, &c->owner);
	if (err) {
		nrs_err("cannot set up the owner record: %s", strerror(-err));
		return err;
	}
	err = nrs_owner_claim(c->owner, o->recover);	/* CW1 */
	if (err == -EBUSY && was_owner) {
		nrs_err("fenced: another daemon owns this bucket; mount with "
			"-o recover to take it back");
		return -EBUSY;
	}
	if (err == -EBUSY) {
		nrs_err("another daemon owns this bucket, and this data "
			"directory never did: mount with -o recover to take it "
			"over");
		return -EBUSY;
	}
	if (err == -EUCLEAN) {
		nrs_err("the bucket's owner record is damaged: mount with -o "
			"recover to write a new one");
		return -EUCLEAN;
	}
	if (err == 0 && !was_owner)
		err = nrs_owner_id_mark_owner(c->data_dir, oo.id);
	else if (err) {
		nrs_warn("owner record: %s: going on; the bucket is claimed "
			 "when the store answers", strerror(-err));
		err = 0;
	}
	if (err)
		return err;
	err = nrs_owner_start(c->owner, o->recover);
	if (err == 0)
		err = nrs_owner_store_wrap(c->store, c->owner, &c->owned_store);
	if (err)
		nrs_err("cannot start the owner record's renewals: %s",
			strerror(-err));
	return err;
}

void nrs_core_owner_close(struct nrs_core *c)
{
	nrs_obj_close(c->owned_store);
	c->owned_store = NULL;
	nrs_owner_close(c->owner);
	c->owner = NULL;
}

bool nrs_core_is_fenced(struct nrs_core *c)
{
	return c->owner && nrs_owner_is_fenced(c->owner);	/* CW2 */
}

struct nrs_owner *nrs_core_owner(struct nrs_core *c)
{
	return c->owner;
}
