// A real OpenID provider for the SSO tests: panva's `oidc-provider` (pinned in .ci/node-tools.json),
// certified by the OpenID Foundation, configured here and nothing more. Its own development login
// page (devInteractions) is what the browser fills in.
//
//   node oidc_provider.mjs <oidc-provider's lib/index.js> <port> '<json>'
//   json: {"client_id", "client_secret", "redirect_uris": [...], "accounts": {"<login>": {claims}}}
//
// The package is imported by path: it is installed in .ci/node, not beside this file.
// Prints "listening <issuer>" once it accepts connections.

import { pathToFileURL } from "node:url";

const { default: Provider } = await import(pathToFileURL(process.argv[2]).href);
const port = Number(process.argv[3]);
const options = JSON.parse(process.argv[4]);
const issuer = `http://127.0.0.1:${port}`;
const SCOPES = "openid profile email groups";

const provider = new Provider(issuer, {
  clients: [
    {
      client_id: options.client_id,
      client_secret: options.client_secret,
      redirect_uris: options.redirect_uris,
      grant_types: ["authorization_code"],
      response_types: ["code"],
      token_endpoint_auth_method: "client_secret_basic",
    },
  ],
  pkce: { required: () => true }, // a sign-in without a code challenge is refused
  scopes: SCOPES.split(" "),
  claims: { openid: ["sub"], profile: ["name"], email: ["email"], groups: ["groups"] },
  features: { devInteractions: { enabled: true } },
  cookies: { keys: ["hatchway-tests-only"] },
  // Only the accounts given exist; the password field of the dev login page is not checked.
  async findAccount(_ctx, id) {
    const claims = options.accounts[id];
    if (!claims) return undefined;
    return { accountId: id, claims: async () => ({ sub: id, ...claims }) };
  },
  // A first-party client is not asked for consent (oidc-provider's own "skip consent" recipe).
  async loadExistingGrant(ctx) {
    const grantId = ctx.oidc.result?.consent?.grantId || ctx.oidc.session.grantIdFor(ctx.oidc.client.clientId);
    if (grantId) return ctx.oidc.provider.Grant.find(grantId);
    const grant = new ctx.oidc.provider.Grant({ clientId: ctx.oidc.client.clientId, accountId: ctx.oidc.session.accountId });
    grant.addOIDCScope(SCOPES);
    await grant.save();
    return grant;
  },
});

provider.on("server_error", (_ctx, error) => console.error("server_error", error));

provider.listen(port, "127.0.0.1", () => console.log(`listening ${issuer}`));
