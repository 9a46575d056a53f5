"""VOMS test material: an attribute certificate sequence to put in a proxy."""

from __future__ import annotations

from cryptography import x509
from pyasn1.codec.der import encoder
from pyasn1.type import univ
from pyasn1_modules import rfc5280, rfc5755

from htgrid.client.x509 import VOMS_AC_SEQ

__all__ = ["voms_extension"]


def voms_extension(vo: str, fqans: list[str]) -> x509.Extension[x509.ExtensionType]:
    """A VOMS AC sequence as voms-proxy-init puts in a proxy, built with pyasn1-modules."""
    syntax = rfc5755.IetfAttrSyntax()
    authority = syntax["policyAuthority"].clone()
    general = rfc5280.GeneralName()
    general["uniformResourceIdentifier"] = f"{vo}://voms.example.org:15000"
    authority.append(general)
    syntax["policyAuthority"] = authority
    for fqan in fqans:
        value = syntax["values"].getComponentType().clone()
        value["octets"] = univ.OctetString(fqan.encode())
        syntax["values"].append(value)
    ac = rfc5755.AttributeCertificate()
    info = ac["acinfo"]
    info["version"] = 1
    info["holder"]["entityName"].append(rfc5280.GeneralName())
    info["holder"]["entityName"][0]["uniformResourceIdentifier"] = "holder"
    info["issuer"]["v2Form"]["issuerName"].append(rfc5280.GeneralName())
    info["issuer"]["v2Form"]["issuerName"][0]["uniformResourceIdentifier"] = "voms"
    info["signature"]["algorithm"] = univ.ObjectIdentifier("1.2.840.113549.1.1.11")
    info["serialNumber"] = 7
    info["attrCertValidityPeriod"]["notBeforeTime"] = "20260101000000Z"
    info["attrCertValidityPeriod"]["notAfterTime"] = "20300101000000Z"
    attribute = rfc5280.Attribute()
    attribute["type"] = univ.ObjectIdentifier("1.3.6.1.4.1.8005.100.100.4")
    attribute["values"].append(rfc5280.AttributeValue(encoder.encode(syntax)))
    info["attributes"].append(attribute)
    ac["signatureAlgorithm"]["algorithm"] = univ.ObjectIdentifier("1.2.840.113549.1.1.11")
    ac["signatureValue"] = univ.BitString.fromOctetString(b"\x00" * 16)
    sequence = univ.SequenceOf(componentType=rfc5755.AttributeCertificate())
    sequence.append(ac)
    der = encoder.encode(sequence)
    return x509.Extension(VOMS_AC_SEQ, False, x509.UnrecognizedExtension(VOMS_AC_SEQ, der))
