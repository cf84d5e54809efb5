
{
V
T
service.nameD
Bssssssssssssssssssssssssssssssssssssssssssssssssssssssssssssssssss!
««««««««««««««««ÍÍÍÍÍÍÍÍ*n