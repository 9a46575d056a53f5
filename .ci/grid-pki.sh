#!/usr/bin/env bash
# A test PKI for the real grid middleware (ARC CE, GRAM, MyProxy), as an IGTF CA is laid
# out: the CA in /etc/grid-security/certificates under its OpenSSL subject hashes (new and
# old) with a Globus signing_policy, the host credential in /etc/grid-security, and a user
# credential the tests make their proxies from. Idempotent: a PKI that is there and valid
# for another week is kept (the tests' proxies stay valid across runs).
#
#   bash .ci/grid-pki.sh     # needs root
#
# Files (all under $HTGRID_REALGRID_DIR, default /var/tmp/htgrid-realgrid/pki):
#   ca.pem ca.key            /DC=org/DC=realgridtest/CN=htgrid Test CA
#   host.pem host.key        /DC=org/DC=realgridtest/CN=localhost (SAN localhost, 127.0.0.1)
#   user.pem user.key        /DC=org/DC=realgridtest/CN=Test User (mapped to user gridtest)
set -euo pipefail

R=${HTGRID_REALGRID_DIR:-/var/tmp/htgrid-realgrid}
PKI=$R/pki
CADIR=/etc/grid-security/certificates
START=$SECONDS
log() { printf '[grid-pki %3ss] %s\n' "$((SECONDS - START))" "$*"; }

[ "$(id -u)" -eq 0 ] || { log "ERROR: must run as root"; exit 1; }

CASUBJ="/DC=org/DC=realgridtest/CN=htgrid Test CA"
HOSTSUBJ="/DC=org/DC=realgridtest/CN=localhost"
USERSUBJ="/DC=org/DC=realgridtest/CN=Test User"

# The local account grid identities map to: A-REX refuses to map a job to root.
id gridtest >/dev/null 2>&1 || useradd -m -s /bin/sh gridtest

valid() { # a certificate valid for another week
    [ -s "$1" ] && openssl x509 -in "$1" -noout -checkend 604800 >/dev/null 2>&1
}
installed() {
    local h
    h=$(openssl x509 -in "$PKI/ca.pem" -noout -subject_hash 2>/dev/null) || return 1
    cmp -s "$PKI/ca.pem" "$CADIR/$h.0" && cmp -s "$PKI/host.pem" /etc/grid-security/hostcert.pem
}

if valid "$PKI/ca.pem" && valid "$PKI/host.pem" && valid "$PKI/user.pem" && installed; then
    log "already there ($PKI)"
    exit 0
fi

rm -rf "$PKI"
mkdir -p "$PKI" "$CADIR"
cd "$PKI"
umask 077
cat >ext.cnf <<'EOF'
[host_ext]
basicConstraints=critical,CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=serverAuth,clientAuth
subjectAltName=DNS:localhost,IP:127.0.0.1
authorityKeyIdentifier=keyid
[user_ext]
basicConstraints=critical,CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment,dataEncipherment
extendedKeyUsage=clientAuth
authorityKeyIdentifier=keyid
EOF
openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.pem -days 365 -subj "$CASUBJ" \
    -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign 2>/dev/null
sign() { # name subject extensions
    openssl req -new -newkey rsa:2048 -nodes -keyout "$1.key" -out "$1.csr" -subj "$2" 2>/dev/null
    openssl x509 -req -in "$1.csr" -CA ca.pem -CAkey ca.key -CAcreateserial -out "$1.pem" \
        -days 365 -extfile ext.cnf -extensions "$3" 2>/dev/null
}
sign host "$HOSTSUBJ" host_ext
sign user "$USERSUBJ" user_ext
chmod 644 ./*.pem
chmod 755 "$PKI"

# The CA as Globus and OpenSSL look it up: both subject hashes, and the signing policy
# (GRAM and MyProxy refuse a CA without one).
cat >ca.signing_policy <<EOF
access_id_CA      X509         '$CASUBJ'
pos_rights        globus        CA:sign
cond_subjects     globus       '"/DC=org/DC=realgridtest/*"'
EOF
for h in $(openssl x509 -in ca.pem -noout -subject_hash) $(openssl x509 -in ca.pem -noout -subject_hash_old); do
    install -m 644 ca.pem "$CADIR/$h.0"
    install -m 644 ca.signing_policy "$CADIR/$h.signing_policy"
done
install -m 644 host.pem /etc/grid-security/hostcert.pem
install -m 400 host.key /etc/grid-security/hostkey.pem
log "made and installed: CA hash $(openssl x509 -in ca.pem -noout -subject_hash)"
