#include <utility>  // Boost 1.74 asio uses std::exchange without including it

#include <boost/asio.hpp>

#include "tests/server/kilnd_process.h"

namespace kiln::testing {

std::string HttpGet(const std::string& host_port, const std::string& path) {
  try {
    auto colon = host_port.rfind(':');
    boost::asio::io_context io;
    boost::asio::ip::tcp::resolver resolver(io);
    boost::asio::ip::tcp::socket socket(io);
    boost::asio::connect(socket, resolver.resolve(host_port.substr(0, colon), host_port.substr(colon + 1)));
    std::string req = "GET " + path + " HTTP/1.0\r\nHost: " + host_port + "\r\n\r\n";
    boost::asio::write(socket, boost::asio::buffer(req));
    std::string response;
    boost::system::error_code ec;
    boost::asio::read(socket, boost::asio::dynamic_buffer(response), ec);
    auto body = response.find("\r\n\r\n");
    if (response.rfind("HTTP/1.", 0) != 0 || response.find(" 200 ") == std::string::npos ||
        body == std::string::npos) {
      return "";
    }
    return response.substr(body + 4);
  } catch (const std::exception&) {
    return "";
  }
}

}  // namespace kiln::testing
