/*
 * owner_store.c - an object store that stops writing once its owner is
 * fenced (owner.h nrs_owner_store_wrap), the store the materializer and
 * the lifecycle get.
 *
 *  OS1 Once the owner is fenced (owner.c OR2), put, put_cond, del and
 *      punch fail -ESTALE before they reach the store: a fenced daemon's
 *      GC must not delete what the new owner needs, nor its materializer
 *      write what the new owner does not know of.  head and get go on
 *      (reads of the bytes this daemon acknowledged while it owned the
 *      bucket).
 *  OS2 The inner store's punch (objstore.h nrs_obj_punch: the embedded
 *      store's holes in adopted files, lifecycle.c G6, G9) is passed on,
 *      so that the lifecycle, which gets this store, frees the bytes of
 *      retired adopted records: without it every punch failed
 *      -EOPNOTSUPP and a WAL object kept every slice's bytes until its
 *      last row went (G7).
 *
 * The check is made as each request starts: a request already sent when
 * the fence came finishes (the new owner's recovery reads only what is
 * proven, DESIGN.md 6, and a key never holds other bytes).
 */
#include "config.h"

#include <errno.h>
#include <stdlib.h>

#include "obj/objstore.h"
#include "owner/owner.h"

struct owner_store {
	struct nrs_objstore base;
	struct nrs_objstore_ops ops;	/* owner_store_ops, with wants_md5
					 * of inner */
	struct nrs_objstore *inner;	/* borrowed */
	struct nrs_owner *owner;	/* borrowed */
};

static struct owner_store *os_of(struct nrs_objstore *s)
{
	return (struct owner_store *)s;
}

/* OS1 */
static bool refuses(const struct owner_store *o)
{
	return nrs_owner_is_fenced(o->owner);
}

static int os_put(struct nrs_objstore *s, const char *key, const void *buf,
		  size_t len, const unsigned char md5[NRS_MD5_LEN],
		  const unsigned char sha256[NRS_SHA256_LEN])
{
	struct owner_store *o = os_of(s);

	if (refuses(o))
		return -ESTALE;
	return nrs_obj_put(o->inner, key, buf, len, md5, sha256);
}

static int os_put_cond(struct nrs_objstore *s, const char *key,
		       const void *buf, size_t len,
		       const unsigned char md5[NRS_MD5_LEN],
		       const unsigned char sha256[NRS_SHA256_LEN],
		       const char *if_match, char etag[NRS_ETAG_MAX])
{
	struct owner_store *o = os_of(s);

	if (refuses(o))
		return -ESTALE;
	return nrs_obj_put_cond(o->inner, key, buf, len, md5, sha256,
				if_match, etag);
}

static int os_head(struct nrs_objstore *s, const char *key,
		   struct nrs_obj_meta *out)
{
	return nrs_obj_head(os_of(s)->inner, key, out);
}

static ssize_t os_get(struct nrs_objstore *s, const char *key, uint64_t off,
		      void *buf, size_t len)
{
	return nrs_obj_get(os_of(s)->inner, key, off, buf, len);
}

static int os_del(struct nrs_objstore *s, const char *key)
{
	struct owner_store *o = os_of(s);

	if (refuses(o))
		return -ESTALE;
	return nrs_obj_del(o->inner, key);
}

/* OS1, OS2 */
static int os_punch(struct nrs_objstore *s, const char *key, uint64_t off,
		    uint64_t len)
{
	struct owner_store *o = os_of(s);

	if (refuses(o))
		return -ESTALE;
	return nrs_obj_punch(o->inner, key, off, len);
}

static void os_close(struct nrs_objstore *s)
{
	free(os_of(s));
}

/* The inner store's wants_md5 is set in each instance's copy. */
static const struct nrs_objstore_ops owner_store_ops = {
	.name = "owned",
	.put = os_put,
	.put_cond = os_put_cond,
	.head = os_head,
	.get = os_get,
	.del = os_del,
	.punch = os_punch,			/* OS2 */
	.close = os_close,
};

int nrs_owner_store_wrap(struct nrs_objstore *inner, struct nrs_owner *owner,
			 struct nrs_objstore **out)
{
	struct owner_store *o;

	if (!inner || !owner)
		return -EINVAL;
	o = calloc(1, sizeof(*o));
	if (!o)
		return -ENOMEM;
	o->ops = owner_store_ops;
	o->ops.wants_md5 = nrs_obj_wants_md5(inner);
	o->base.ops = &o->ops;
	o->inner = inner;
	o->owner = owner;
	*out = &o->base;
	return 0;
}
