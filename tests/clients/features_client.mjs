// A non-Python client of `solaris serve`: Node.js 18+ with only its built-in fetch.
//
//   node features_client.mjs BASE_URL json|binary '{"user_id":1,"item_ids":[..],"event_time_ms":..}'
//
// Asks POST BASE_URL/v1/features for the request in the given form, decodes the answer (the
// binary layout is documented in streams/serve/protocol.py and docs/feature-server.md) and
// prints one JSON line: {status, format, n, dim, tiers, tier_codes, ages_ms, vectors,
// read_error, health}. Float32 values print as the doubles they widen to, so a Python reader can
// compare them bit for bit. Exits 1 on a non-200 answer or a malformed body.

const [base, format, requestJson] = process.argv.slice(2);
if (!base || !["json", "binary"].includes(format) || !requestJson) {
  console.error("usage: features_client.mjs BASE_URL json|binary REQUEST_JSON");
  process.exit(2);
}

function decodeBinary(buf, tierNames) {
  const view = new DataView(buf);
  const magic = String.fromCharCode(...new Uint8Array(buf, 0, 4));
  const version = view.getUint16(4, true);
  if (magic !== "SOLF" || version !== 1) throw new Error(`not a v1 answer: ${magic} v${version}`);
  const flags = view.getUint16(6, true);
  const n = view.getUint32(8, true);
  const dim = view.getUint32(12, true);
  const agesAt = 16 + n + ((8 - (n % 8)) % 8);
  const vectorsAt = agesAt + 8 * n;
  if (buf.byteLength !== vectorsAt + 4 * n * dim) throw new Error("truncated answer");
  const codes = Array.from(new Uint8Array(buf, 16, n));
  const ages = Array.from(new BigInt64Array(buf, agesAt, n), (a) => Number(a));
  const flat = new Float32Array(buf, vectorsAt, n * dim); // little-endian hosts (x86, arm64)
  const vectors = [];
  for (let i = 0; i < n; i++) vectors.push(Array.from(flat.subarray(i * dim, (i + 1) * dim)));
  return {
    n,
    dim,
    tiers: codes.map((c) => tierNames[c]),
    tier_codes: codes,
    ages_ms: ages,
    vectors,
    read_error: flags & 1 ? "read_failed" : null,
  };
}

async function main() {
  const accept = format === "binary" ? "application/octet-stream" : "application/json";
  const res = await fetch(new URL("/v1/features", base), {
    method: "POST",
    headers: { "Content-Type": "application/json", Accept: accept },
    body: requestJson,
  });
  if (res.status !== 200) {
    console.log(JSON.stringify({ status: res.status, format, error: await res.json() }));
    process.exit(1);
  }
  let answer;
  if (format === "binary") {
    const names = (res.headers.get("x-solaris-tier-names") || "").split(",");
    answer = decodeBinary(await res.arrayBuffer(), names);
  } else {
    answer = await res.json();
  }
  const health = await (await fetch(new URL("/healthz", base))).json();
  console.log(JSON.stringify({ status: res.status, format, ...answer, health }));
}

main().catch((err) => {
  console.error(String(err && err.stack ? err.stack : err));
  process.exit(1);
});
