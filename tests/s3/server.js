// tests/s3/server.js - s3rver as the tests run it (started by s3rver.sh).
//
//   node server.js DIR BUCKET [KEY.pem CERT.pem]
//
// Serves on 127.0.0.1, on a port the kernel picks, with its data in DIR
// and BUCKET made; https when given a key and a certificate.  Prints
// "S3rver listening on 127.0.0.1:PORT" once it serves.  The s3rver package
// is NRS_S3RVER (a directory) or node_modules/s3rver beside this file, and
// must be the version package.json pins.
//
// s3rver 3.7.1 differs from S3 where the tests look, so three of its
// behaviours are put right here, in front of it:
//  - It ignores Content-MD5.  S3 refuses a PUT whose body does not match
//    (400 BadDigest) or whose Content-MD5 is not a base64 MD5 (400
//    InvalidDigest), and stores nothing; so does this, which buffers the
//    body of such a PUT to check it first.
//  - A range GET of an empty object answers 206 with Content-Length 1 and
//    no body.  S3 answers 416 InvalidRange (no byte of it is satisfiable);
//    so does this.
//  - A PUT is answered once the body has been read, not once it is in the
//    object's file (its store resolves on the hashing stream's 'finish',
//    ahead of the file's), so a HEAD or GET right after the 200 can see a
//    shorter object.  S3 is read-after-write consistent; this answers only
//    once the file holds every byte.  (nereusfs proves each upload with a
//    HEAD; against the unpatched server it saw short objects, quarantined
//    them and uploaded again under new keys, several times per object.)
'use strict';

const crypto = require('crypto');
const fs = require('fs');
const path = require('path');
const { PassThrough, Readable, Transform } = require('stream');
const { pipeline } = require('stream/promises');

const pkgDir = process.env.NRS_S3RVER || path.join(__dirname, 'node_modules', 's3rver');
const S3rver = require(pkgDir);
const S3Error = require(path.join(pkgDir, 'lib', 'models', 'error'));

const pinned = require(path.join(__dirname, 'package.json')).dependencies.s3rver;
const installed = require(path.join(pkgDir, 'package.json')).version;
if (installed !== pinned) {
  console.error(`s3rver ${installed} at ${pkgDir}, but package.json pins ${pinned}: run contrib/install-deps.sh`);
  process.exit(1);
}

const [directory, bucket, keyFile, certFile] = process.argv.slice(2);
if (!directory || !bucket || (keyFile && !certFile)) {
  console.error('usage: node server.js DIR BUCKET [KEY.pem CERT.pem]');
  process.exit(2);
}

async function checkContentMd5(ctx, next) {
  const given = ctx.get('content-md5');
  const isObjectPut = ctx.method === 'PUT' && /^\/[^/]+\/.+/.test(ctx.path) &&
    !ctx.get('x-amz-copy-source');
  if (!isObjectPut || !given) return next();
  const want = Buffer.from(given, 'base64');
  if (want.length !== 16 || want.toString('base64') !== given) {
    throw new S3Error('InvalidDigest', 'The Content-MD5 you specified was invalid.',
      { 'Content-MD5': given });
  }
  const chunks = [];
  for await (const chunk of ctx.req) chunks.push(chunk);
  const body = Buffer.concat(chunks);
  const got = crypto.createHash('md5').update(body).digest();
  if (!got.equals(want)) {
    throw new S3Error('BadDigest', 'The Content-MD5 you specified did not match what we received.',
      { ExpectedDigest: want.toString('hex'), CalculatedDigest: got.toString('hex') });
  }
  // s3rver reads the body from ctx.req (its headers from ctx.request.req)
  const replay = new PassThrough();
  replay.end(body);
  ctx.req = replay;
  return next();
}

async function main() {
  const options = {
    directory,
    address: '127.0.0.1',
    port: 0,
    configureBuckets: [{ name: bucket, configs: [] }],
  };
  if (keyFile) {
    options.key = fs.readFileSync(keyFile);
    options.cert = fs.readFileSync(certFile);
  }
  const server = new S3rver(options);

  const getObject = server.store.getObject.bind(server.store);
  server.store.getObject = async (...args) => {
    const object = await getObject(...args);
    if (object && object.range && object.content && Number(object.size) === 0) {
      object.content.destroy();
      object.content = null;	// answered as InvalidRange
    }
    return object;
  };
  // The store's putObject, but resolved once the file is written.
  const store = server.store;
  store.putObject = async (object) => {
    const objectPath = store.getResourcePath(object.bucket, object.key, 'object');
    await fs.promises.mkdir(path.dirname(objectPath), { recursive: true });
    const md5 = crypto.createHash('md5');
    let size = 0;
    const content = Buffer.isBuffer(object.content)
      ? Readable.from([object.content]) : object.content;
    await pipeline(content, new Transform({
      transform(chunk, encoding, callback) {
        md5.update(chunk);
        size += chunk.length;
        callback(null, chunk);
      },
    }), fs.createWriteStream(objectPath));
    const digest = md5.digest('hex');
    await store.putMetadata(object.bucket, object.key, object.metadata, digest);
    return { size, md5: digest };
  };
  // after the request logger, before everything else
  server.middleware.splice(1, 0, checkContentMd5);

  const { address, port } = await server.run();
  console.log('S3rver listening on %s:%d', address, port);
}

main().catch(err => {
  console.error(err);
  process.exit(1);
});
