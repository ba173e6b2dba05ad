"""Makes a container in Azurite: object_store cannot, the Azure SDK can.

Usage: azure_container.py ENDPOINT ACCOUNT KEY CONTAINER
"""
import sys

from azure.storage.blob import BlobServiceClient

endpoint, account, key, container = sys.argv[1:]
service = BlobServiceClient.from_connection_string(
    f"DefaultEndpointsProtocol=http;AccountName={account};AccountKey={key};"
    f"BlobEndpoint={endpoint}/{account};"
)
service.create_container(container)
